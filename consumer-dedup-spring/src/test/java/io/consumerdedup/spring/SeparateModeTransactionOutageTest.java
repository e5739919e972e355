package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.jdbc.datasource.DelegatingDataSource;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.annotation.Transactional;

/**
 * A {@code @Transactional} listener in mode SEPARATE, its keys claimed with the poll's, whose
 * transaction cannot be opened for a while after the claim (its database refuses connections; the
 * dedup table's stays up): the listener was never called, so no attempt may be counted. With one
 * attempt allowed, a counted one had the next delivery dead-letter the record, never applied.
 */
@SpringBootTest(
    classes = SeparateModeTransactionOutageTest.App.class,
    properties = "consumer-dedup.max-attempts=1")
@DirtiesContext
class SeparateModeTransactionOutageTest {
  static final String TOPIC = "sep-tx-outage";
  static final String BATCH = "sep-tx-outage-batch";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_sep_tx_outage", TOPIC, BATCH);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;

  @Test
  void aRecordWhoseTransactionCannotOpenCountsNoAttemptAndIsAppliedAfterwards() throws Exception {
    assertAppliedOnceAfterTheOutage(TOPIC, "SO-1");
  }

  @Test
  void aBatchWhoseTransactionCannotOpenCountsNoAttemptAndIsAppliedAfterwards() throws Exception {
    assertAppliedOnceAfterTheOutage(BATCH, "SB-1");
  }

  private void assertAppliedOnceAfterTheOutage(String topic, String orderNo) throws Exception {
    RefusingDataSource.refused.set(0);
    RefusingDataSource.refusing.set(true);
    long offset = SpringTestEnvironment.send(template, topic, "charge 8", "order-no", orderNo);
    try {
      await()
          .atMost(Duration.ofSeconds(15))
          .until(
              () ->
                  RefusingDataSource.refused.get() >= 2
                      || SpringTestEnvironment.committed(topic, topic, 0) > offset);
    } finally {
      RefusingDataSource.refusing.set(false);
    }

    await()
        .atMost(Duration.ofSeconds(30))
        .until(() -> SpringTestEnvironment.committed(topic, topic, 0) > offset);
    assertThat(Calls.calls.get(orderNo))
        .as("calls of the listener, whose transaction first could not be opened")
        .hasValue(1);
    DedupRecord record = store.find(DedupKey.of(topic, orderNo)).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).as("attempts counted").isEqualTo(1);
  }

  /** The listener's database, refusing connections while {@link #refusing}. */
  static final class RefusingDataSource extends DelegatingDataSource {
    static final AtomicBoolean refusing = new AtomicBoolean();
    static final AtomicInteger refused = new AtomicInteger();

    RefusingDataSource(DataSource target) {
      super(target);
    }

    @Override
    public Connection getConnection() throws SQLException {
      if (refusing.get()) {
        refused.incrementAndGet();
        throw new SQLException("Connection refused", "08001");
      }
      return super.getConnection();
    }
  }

  static final class Calls {
    static final Map<String, AtomicInteger> calls = new ConcurrentHashMap<>();

    static void call(ConsumerRecord<String, String> record) {
      calls
          .computeIfAbsent(
              SpringTestEnvironment.header(record, "order-no"), k -> new AtomicInteger())
          .incrementAndGet();
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    DataSourceTransactionManager listenerTransactions(DataSource dataSource) {
      return new DataSourceTransactionManager(new RefusingDataSource(dataSource));
    }

    @Bean
    Listener listener() {
      return new Listener();
    }
  }

  static class Listener {
    @Transactional("listenerTransactions")
    @Idempotent(bizType = TOPIC, header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public void charge(ConsumerRecord<String, String> record) {
      Calls.call(record);
    }

    @Transactional("listenerTransactions")
    @Idempotent(bizType = BATCH, header = "order-no")
    @KafkaListener(id = BATCH, topics = BATCH, batch = "true")
    public void chargeAll(List<ConsumerRecord<String, String>> records) {
      records.forEach(Calls::call);
    }
  }
}
