package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An {@code @Idempotent} listener returning a {@code CompletableFuture}, in a container that runs
 * each record in a Kafka transaction, whose future is cancelled (the client it waits on gives up,
 * the application cancels its calls in flight): a failure of the call like any other, recorded
 * FAILED, so the redelivery runs the listener again. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(
    classes = AsyncListenerCancelledFutureTest.App.class,
    properties = {
      "spring.kafka.producer.transaction-id-prefix=dedup-async-cancel-",
      "spring.kafka.consumer.properties.isolation.level=read_committed",
      "consumer-dedup.hold.initial-backoff=200ms",
      "consumer-dedup.hold.max-backoff=400ms"
    })
@DirtiesContext
class AsyncListenerCancelledFutureTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String TOPIC = "acf-cancelled";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "acf", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;

  @Test
  void aCancelledFutureInAKafkaTransactionIsAFailureTheRedeliveryRetries() throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(TOPIC, "order C-1");
    record.headers().add("order-no", "C-1".getBytes(StandardCharsets.UTF_8));
    long offset =
        template.executeInTransaction(t -> t.send(record)).get().getRecordMetadata().offset();

    await()
        .atMost(WAIT)
        .untilAsserted(
            () ->
                assertThat(status("C-1"))
                    .as(
                        "the key of C-1 (listener calls: %s, the first one's future cancelled: %s)",
                        Listeners.calls.get(), Listeners.cancelled.get())
                    .isEqualTo(DedupStatus.SUCCESS));
    assertThat(Listeners.cancelled).as("futures cancelled").hasValue(1);
    assertThat(Listeners.calls).as("the cancelled call, then the redelivery").hasValue(2);
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(TOPIC, TOPIC, 0) > offset);
  }

  private DedupStatus status(String orderNo) {
    return store.find(DedupKey.of(TOPIC, orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listeners {
    static final AtomicInteger calls = new AtomicInteger();
    static final AtomicInteger cancelled = new AtomicInteger();

    @Idempotent(bizType = TOPIC, header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public CompletableFuture<String> pay(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      if (calls.incrementAndGet() > 1) {
        return CompletableFuture.completedFuture(orderNo);
      }
      CompletableFuture<String> call = new CompletableFuture<>();
      CompletableFuture.delayedExecutor(200, TimeUnit.MILLISECONDS)
          .execute(
              () -> {
                if (call.cancel(true)) {
                  cancelled.incrementAndGet();
                }
              });
      return call;
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners() {
      return new Listeners();
    }
  }
}
