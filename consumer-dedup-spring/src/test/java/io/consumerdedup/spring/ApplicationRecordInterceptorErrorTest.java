package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.spring.internal.CurrentRecordInterceptor;
import io.consumerdedup.spring.internal.GuardedRecordInterceptor;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.IntStream;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.AbstractMessageListenerContainer;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.listener.RecordInterceptor;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * Row 63 through Spring Boot, consumer-dedup at its defaults: the application's own {@code
 * RecordInterceptor} bean, which Boot puts on every listener container, throws an {@code Error} as
 * the consumer thread clears its state after a poll that a nack cut short. consumer-dedup's
 * interceptor, which Boot composes after it, must still give back the claims of the poll's records
 * the listener never got, and the container must stop as for any {@code Error}. Composed as
 * spring-kafka's own composite does, the application's {@code Error} skipped consumer-dedup's
 * interceptor and ended the consumer thread without closing the consumer: the claims stayed
 * PROCESSING under leases the executor renewed until the process stopped, so no consumer of the
 * group could apply their records, and the container still said it was running. A real PostgreSQL
 * and the in-JVM broker.
 */
@SpringBootTest(classes = ApplicationRecordInterceptorErrorTest.App.class)
@DirtiesContext
class ApplicationRecordInterceptorErrorTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String TOPIC = "arie-orders";
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();
  static final AtomicBoolean nackUntilClearFailed = new AtomicBoolean();
  static final AtomicBoolean failNextClear = new AtomicBoolean();
  static final AtomicBoolean clearFailed = new AtomicBoolean();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "app_interceptor_error", TOPIC);
    // A nack cuts the poll short: the claims of its later records are given back as the consumer
    // thread clears its state.
    registry.add("spring.kafka.listener.ack-mode", () -> "manual");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void
      anErrorOfTheApplicationsInterceptorClearingThreadStateStillGivesThePollsClaimsBackAndStopsTheContainer()
          throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    assertThat(((AbstractMessageListenerContainer<?, ?>) container).getRecordInterceptor())
        .as("the application's interceptor, then consumer-dedup's, guarded")
        .isInstanceOfSatisfying(
            GuardedRecordInterceptor.class,
            guarded ->
                assertThat(
                        GuardedRecordInterceptor.contains(guarded, CurrentRecordInterceptor.class))
                    .isTrue());
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    container.pause();
    await().atMost(WAIT).until(container::isContainerPaused);
    for (int i = 1; i <= 4; i++) {
      send("K-" + i);
    }
    nackUntilClearFailed.set(true);
    container.resume();

    await().atMost(WAIT).until(clearFailed::get);
    await().atMost(WAIT).alias("the container stops").until(() -> !container.isRunning());
    assertThat(effects).as("nothing applied yet: K-1 was nacked").isEmpty();
    for (int i = 2; i <= 4; i++) {
      assertThat(status("K-" + i)).as("K-" + i + ", claimed with the poll, given back").isNull();
    }

    container.start();
    await().atMost(WAIT).until(() -> effects.size() == 4);
    effects.forEach((key, count) -> assertThat(count.get()).as(key).isEqualTo(1));
    for (int i = 1; i <= 4; i++) {
      int n = i;
      await().atMost(WAIT).until(() -> status("K-" + n) == DedupStatus.SUCCESS);
    }
  }

  private void send(String orderNo) throws Exception {
    SpringTestEnvironment.send(template, TOPIC, "payload of " + orderNo, "order-no", orderNo);
  }

  private DedupStatus status(String orderNo) {
    return store.find(DedupKey.of("arie", orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listener {
    final DedupStore store;

    Listener(DedupStore store) {
      this.store = store;
    }

    @Idempotent(bizType = "arie", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    void onOrder(String payload, @Header("order-no") String orderNo, Acknowledgment ack) {
      // Until a nack leaves claims to give back: K-1 may come in a poll of its own first.
      if (orderNo.equals("K-1") && nackUntilClearFailed.get() && !clearFailed.get()) {
        // The poll's keys are claimed at its first record: the others came with K-1.
        failNextClear.set(
            IntStream.rangeClosed(2, 4)
                .allMatch(
                    i ->
                        store
                                .find(DedupKey.of("arie", "K-" + i))
                                .map(DedupRecord::status)
                                .orElse(null)
                            == DedupStatus.PROCESSING));
        ack.nack(Duration.ofMillis(100));
        return;
      }
      effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      ack.acknowledge();
    }
  }

  /**
   * The application's interceptor: once armed, it throws an Error as the thread state is cleared
   * after a poll in which the listener left claims unused.
   */
  static final class FailingInterceptor implements RecordInterceptor<Object, Object> {
    @Override
    public ConsumerRecord<Object, Object> intercept(
        ConsumerRecord<Object, Object> record, Consumer<Object, Object> consumer) {
      return record;
    }

    @Override
    public void clearThreadState(Consumer<?, ?> consumer) {
      if (failNextClear.getAndSet(false)) {
        clearFailed.set(true);
        throw new ApplicationInterceptorError();
      }
    }
  }

  /** An Error of the application's, not one the JVM throws. */
  static final class ApplicationInterceptorError extends Error {
    ApplicationInterceptorError() {
      super("the application's interceptor failed");
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listener listener(DedupStore store) {
      return new Listener(store);
    }

    @Bean
    RecordInterceptor<Object, Object> applicationInterceptor() {
      return new FailingInterceptor();
    }
  }
}
