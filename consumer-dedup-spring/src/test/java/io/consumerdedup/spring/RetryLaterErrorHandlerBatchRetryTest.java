package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatCode;

import io.consumerdedup.spring.internal.ContainerPartitionHolds;
import io.consumerdedup.spring.internal.MissingKeyArguments;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.springframework.kafka.listener.BatchListenerFailedException;
import org.springframework.kafka.listener.CommonErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;

/**
 * An application's error handler of its own that retries a failed batch in memory whatever the
 * failure names: a retry that stops at a record is handled once as a first delivery's stop, and
 * when the delegate retries that in memory too and it stops at the same record again, the delegate
 * gets it as its own retry's failure, not one more handling without end.
 */
class RetryLaterErrorHandlerBatchRetryTest {

  @Test
  void aDelegateThatRetriesEveryFailureInMemoryIsNotHandedTheSameStopWithoutEnd() {
    ConsumerRecord<Object, Object> record = new ConsumerRecord<>("t", 0, 0, null, "no key");
    ConsumerRecords<Object, Object> data =
        new ConsumerRecords<>(Map.of(new TopicPartition("t", 0), List.of(record)), Map.of());
    AtomicInteger delegateHandlings = new AtomicInteger();
    CommonErrorHandler retriesInMemory =
        new CommonErrorHandler() {
          @Override
          public boolean seeksAfterHandling() {
            return true;
          }

          @Override
          public void handleBatch(
              Exception thrownException,
              ConsumerRecords<?, ?> records,
              Consumer<?, ?> consumer,
              MessageListenerContainer container,
              Runnable invokeListener) {
            if (delegateHandlings.incrementAndGet() > 5) {
              throw new AssertionError("handed the same stop again and again");
            }
            for (int i = 0; i < 2; i++) {
              try {
                invokeListener.run();
                return;
              } catch (RuntimeException e) {
                // the next try
              }
            }
          }
        };
    RetryLaterErrorHandler handler =
        new RetryLaterErrorHandler(
            retriesInMemory,
            new ContainerPartitionHolds(Duration.ofMillis(100), Duration.ofSeconds(1)),
            new MissingKeyArguments(Set.of()));
    Runnable stopsAtTheRecord =
        () -> {
          throw new BatchListenerFailedException(
              "stopped", new IllegalArgumentException("no key"), record);
        };

    assertThatCode(
            () ->
                handler.handleBatch(
                    new IllegalStateException("the listener's own failure"),
                    data,
                    null,
                    null,
                    stopsAtTheRecord))
        .doesNotThrowAnyException();
    assertThat(delegateHandlings).as("the delegate's handlings").hasValue(2);
  }
}
