package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import javax.sql.DataSource;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.jdbc.autoconfigure.DataSourceProperties;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Primary;
import org.springframework.jdbc.datasource.lookup.AbstractRoutingDataSource;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * {@code @Transactional(readOnly = true)} listeners in mode SEPARATE, behind a routing DataSource
 * that sends a thread marked read-only to a replica (here: connections of the same database whose
 * sessions refuse writes). Their SUCCESS is written after their transaction, some of it from {@code
 * afterCommit} (a batch's acknowledgments) where the thread is still marked read-only:
 * consumer-dedup's writes must never go out on such a thread, or the replica refuses them.
 */
@SpringBootTest(
    classes = ReadOnlyListenerRoutingTest.App.class,
    properties = "spring.kafka.listener.ack-mode=manual")
@DirtiesContext
class ReadOnlyListenerRoutingTest {
  static final String RECORD = "ro-route-record";
  static final String BATCH = "ro-route-batch";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_ro_route", RECORD, BATCH);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;

  @Test
  void theSuccessOfReadOnlyListenersIsWrittenToThePrimary() throws Exception {
    SpringTestEnvironment.send(template, RECORD, "read 1", "order-no", "RO-1");
    SpringTestEnvironment.send(template, BATCH, "read 2", "order-no", "RB-1");
    SpringTestEnvironment.send(template, BATCH, "read 3", "order-no", "RB-2");

    for (DedupKey key :
        List.of(
            DedupKey.of(RECORD, "RO-1"), DedupKey.of(BATCH, "RB-1"), DedupKey.of(BATCH, "RB-2"))) {
      await()
          .atMost(Duration.ofSeconds(30))
          .alias("SUCCESS of " + key)
          .until(
              () -> store.find(key).map(DedupRecord::status),
              status -> status.equals(Optional.of(DedupStatus.SUCCESS)));
    }
    assertThat(Listeners.readOnlyCalls).as("calls that ran marked read-only").hasValue(3);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    /** The primary for read-write threads, the "replica" for threads marked read-only. */
    @Bean
    @Primary
    DataSource dataSource(DataSourceProperties properties) {
      HikariDataSource primary =
          properties.initializeDataSourceBuilder().type(HikariDataSource.class).build();
      HikariDataSource replica =
          properties.initializeDataSourceBuilder().type(HikariDataSource.class).build();
      replica.setConnectionInitSql("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY");
      AbstractRoutingDataSource routing =
          new AbstractRoutingDataSource() {
            @Override
            protected Object determineCurrentLookupKey() {
              return TransactionSynchronizationManager.isCurrentTransactionReadOnly()
                  ? "replica"
                  : "primary";
            }
          };
      routing.setTargetDataSources(Map.of("primary", primary, "replica", replica));
      routing.setDefaultTargetDataSource(primary);
      return routing;
    }

    @Bean
    Listeners listeners() {
      return new Listeners();
    }
  }

  static class Listeners {
    static final java.util.concurrent.atomic.AtomicInteger readOnlyCalls =
        new java.util.concurrent.atomic.AtomicInteger();

    @Transactional(readOnly = true)
    @Idempotent(bizType = RECORD, header = "order-no")
    @KafkaListener(id = RECORD, topics = RECORD)
    public void read(ConsumerRecord<String, String> record, Acknowledgment ack) {
      noteReadOnly();
      ack.acknowledge();
    }

    @Transactional(readOnly = true)
    @Idempotent(bizType = BATCH, header = "order-no")
    @KafkaListener(id = BATCH, topics = BATCH, batch = "true")
    public void readAll(List<ConsumerRecord<String, String>> records, Acknowledgment ack) {
      for (int i = 0; i < records.size(); i++) {
        noteReadOnly();
        ack.acknowledge(i);
      }
    }

    private static void noteReadOnly() {
      if (TransactionSynchronizationManager.isCurrentTransactionReadOnly()) {
        readOnlyCalls.incrementAndGet();
      }
    }
  }
}
