package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.committed;
import static io.consumerdedup.spring.SpringTestEnvironment.effects;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.RecordInterceptor;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * Spring Boot's defaults (no error handler of the application's, {@code max-attempts} 10; only the
 * hold back-off shortened, to keep the test short): an order listener reserves stock through
 * another bean's {@code @Idempotent} method whose key another consumer holds, as a crashed one does
 * for its lease. The order is held well past its ten attempts without counting one, never given up,
 * and applied once when the holder completes.
 */
@SpringBootTest(
    classes = NestedInProgressAtBootDefaultsTest.App.class,
    properties = {
      "consumer-dedup.hold.initial-backoff=100ms",
      "consumer-dedup.hold.max-backoff=200ms"
    })
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class NestedInProgressAtBootDefaultsTest {
  static final String TOPIC = "nested-defaults";
  static final Duration WAIT = Duration.ofSeconds(30);
  static final AtomicInteger deliveries = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_nested_defaults", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;

  @Test
  void anOrderWhoseStockKeyIsHeldElsewhereIsHeldPastItsAttemptsThenAppliedOnce(
      CapturedOutput output) throws Exception {
    IdempotentExecutor elsewhere = IdempotentExecutor.builder(store).ownerId("elsewhere").build();
    try {
      DedupClaim held = elsewhere.claim(DedupKey.of("stock", "ND-1"), null, "elsewhere");
      assertThat(held.isDuplicate()).as("the stock key claimed by the other consumer").isFalse();
      long offset = send(template, TOPIC, "order 1", "order-no", "ND-1");

      await()
          .atMost(WAIT)
          .failFast(
              "the order was given up",
              () -> output.getAll().contains("Gave up") || committed(TOPIC, TOPIC, 0) > offset)
          .until(() -> deliveries.get() > 12);
      assertThat(effects(jdbc, "order", "ND-1")).as("orders applied while held").isZero();
      assertThat(output.getAll().lines().filter(line -> line.contains("ND-1")))
          .as("lines about the order")
          .noneMatch(line -> line.contains("Handler failed"));

      held.complete();

      await().atMost(WAIT).until(() -> committed(TOPIC, TOPIC, 0) == offset + 1);
      assertThat(effects(jdbc, "order", "ND-1")).as("orders applied").isEqualTo(1);
      DedupRecord order = store.find(DedupKey.of("order", "ND-1")).orElseThrow();
      assertThat(order.status()).isEqualTo(DedupStatus.SUCCESS);
      assertThat(order.attempts()).as("attempts counted for the order").isEqualTo(1);
      assertThat(output.getAll()).doesNotContain("Gave up");
    } finally {
      elsewhere.close();
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    /**
     * Counts deliveries, retries included; consumer-dedup's record interceptor composes with it.
     */
    @Bean
    RecordInterceptor<Object, Object> deliveryCounter() {
      return (record, consumer) -> {
        deliveries.incrementAndGet();
        return record;
      };
    }

    @Bean
    Stock stock() {
      return new Stock();
    }

    @Bean
    Orders orders(JdbcTemplate jdbc, Stock stock) {
      return new Orders(jdbc, stock);
    }
  }

  static class Stock {
    @Idempotent(bizType = "stock", header = "order-no")
    public void reserve(String orderNo) {}
  }

  static class Orders {
    final JdbcTemplate jdbc;
    final Stock stock;

    Orders(JdbcTemplate jdbc, Stock stock) {
      this.jdbc = jdbc;
      this.stock = stock;
    }

    @Idempotent(bizType = "order", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public void onOrder(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      stock.reserve(orderNo);
      SpringTestEnvironment.effect(jdbc, "order", orderNo, record.value());
    }
  }
}
