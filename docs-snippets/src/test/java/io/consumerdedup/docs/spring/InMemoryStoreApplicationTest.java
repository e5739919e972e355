package io.consumerdedup.docs.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.test.InMemoryDedupStore;
import io.consumerdedup.test.RedeliveryReport;
import io.consumerdedup.test.spring.RedeliverEachRecord;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.context.ApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.test.context.EmbeddedKafka;

/**
 * docs/testing.md's way out for an application whose tests run on a database the JDBC store does
 * not support (H2): a {@code DedupStore} bean of the test's own, an {@link InMemoryDedupStore},
 * which the auto-configuration uses instead of its JDBC store. The README's quick-start listener is
 * still protected: each order is charged once though every record arrives twice.
 */
@SpringBootTest(classes = {BillingApplication.class, InMemoryStoreApplicationTest.Store.class})
@EmbeddedKafka(topics = "payments", bootstrapServersProperty = "spring.kafka.bootstrap-servers")
@RedeliverEachRecord
class InMemoryStoreApplicationTest {
  @Autowired KafkaTemplate<String, String> kafka;
  @Autowired RedeliveryReport redelivery;
  @Autowired InMemoryDedupStore store;
  @Autowired ApplicationContext context;

  @TestConfiguration(proxyBeanMethods = false)
  static class Store {
    @Bean
    InMemoryDedupStore dedupStore() {
      return new InMemoryDedupStore();
    }
  }

  @Test
  void theListenerIsProtectedByTheTestsOwnStore() throws Exception {
    kafka.send(payment("A-9001")).get();

    await().atMost(Duration.ofSeconds(30)).until(() -> redelivery.redeliveredCopies() == 1);

    redelivery.assertNoBodyRanTwice();
    assertThat(context.getBeansOfType(DedupStore.class)).containsOnlyKeys("dedupStore");
    assertThat(context.getBeansOfType(JdbcDedupStore.class)).isEmpty();
    await()
        .atMost(Duration.ofSeconds(10))
        .untilAsserted(
            () ->
                assertThat(store.find(DedupKey.of("payment", "A-9001")))
                    .hasValueSatisfying(
                        record -> assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS)));
  }

  private static ProducerRecord<String, String> payment(String orderNo) {
    ProducerRecord<String, String> record = new ProducerRecord<>("payments", "25.00");
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    return record;
  }
}
