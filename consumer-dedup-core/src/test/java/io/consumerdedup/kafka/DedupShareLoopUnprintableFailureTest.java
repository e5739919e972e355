package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.kafka.DedupPollLoopUnprintableFailureTest.UnprintableException;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * As {@link DedupPollLoopUnprintableFailureTest}, for {@link DedupShareLoop}: a handler's exception
 * whose {@code toString()} throws is released for another delivery, then dead-lettered once its
 * attempts are spent, and the records after it are applied.
 */
class DedupShareLoopUnprintableFailureTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("share_unprintable");

  private final ExecutorService threads = Executors.newCachedThreadPool();
  private IdempotentExecutor executor;
  private DedupShareLoop<String, String> loop;

  @AfterEach
  void stop() {
    if (loop != null) {
      loop.close();
    }
    threads.shutdownNow();
    if (executor != null) {
      executor.close();
    }
  }

  @Test
  void aFailureWhoseToStringThrowsIsReleasedThenDeadLetteredOnceAndTheNextRecordIsApplied()
      throws Exception {
    String topic = fixture.topic();
    String group = fixture.group();
    TestKafka.createTopics(1, topic, topic + "-dlt");
    TestShareGroups.configure(group, Duration.ofSeconds(15), Duration.ofSeconds(1));
    send(topic, "U-1");
    send(topic, "G-2");
    AtomicInteger runsOfU1 = new AtomicInteger();
    AtomicInteger runsOfG2 = new AtomicInteger();
    executor = IdempotentExecutor.builder(fixture.store()).build();
    IdempotentRecordHandler<String, String> handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(LoopFixture.BIZ_TYPE)
            .key(KeyExtractors.header(LoopFixture.KEY_HEADER))
            .groupId(group)
            .handler(
                record -> {
                  if (LoopFixture.orderNo(record).equals("U-1")) {
                    runsOfU1.incrementAndGet();
                    throw new UnprintableException("card declined");
                  }
                  runsOfG2.incrementAndGet();
                })
            .build();
    loop =
        DedupShareLoop.builder(TestShareGroups.consumerConfig(group), List.of(topic), handler)
            .deadLetterHandler(
                KafkaDeadLetterPublisher.<String, String>builder(fixture.producer())
                    .groupId(group)
                    .build())
            .maxAttempts(3)
            .retryBackOff(Duration.ofMillis(50))
            .closeTimeout(Duration.ofSeconds(10))
            .build();
    threads.execute(loop);

    assertThat(TestKafka.readFromStart(topic + "-dlt", 1, Duration.ofSeconds(20)))
        .as("dead letters of U-1")
        .hasSize(1);
    // Time for a second dead letter of U-1, had there been one.
    List<ConsumerRecord<String, String>> dead =
        TestKafka.readFromStart(topic + "-dlt", 2, Duration.ofSeconds(2));
    assertThat(dead).as("dead letters of U-1, a while later").hasSize(1);
    assertThat(LoopFixture.orderNo(dead.get(0))).isEqualTo("U-1");
    assertThat(LoopFixture.header(dead.get(0), KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
        .isEqualTo("card declined");
    assertThat(runsOfU1).as("runs of U-1's handler").hasValue(3);
    assertThat(runsOfG2).as("runs of G-2's handler").hasValue(1);
    loop.close();
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3)))
        .as("records left in the share group")
        .isEmpty();
  }

  private static void send(String topic, String orderNo) throws Exception {
    ProducerRecord<String, String> record =
        new ProducerRecord<>(topic, 0, null, "charge " + orderNo);
    record.headers().add(LoopFixture.KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(record).get();
  }
}
