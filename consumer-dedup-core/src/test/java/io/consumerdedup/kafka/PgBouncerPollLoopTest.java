package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.KEY_HEADER;
import static io.consumerdedup.kafka.LoopFixture.WAIT;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestPgBouncer;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Two poll loops of one group, each with a pool of its own on the PgBouncer URL a user writes
 * (transaction pool mode, fewer server connections than client ones): every record is applied once,
 * and no store call meets a statement error or needs a retry, with claims per poll and per record.
 */
class PgBouncerPollLoopTest {
  private static final int PARTITIONS = 2;
  private static final int ORDERS = 120;

  private final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();
  private final List<DedupStoreException> storeFailures = new CopyOnWriteArrayList<>();
  private final List<HikariDataSource> pools = new ArrayList<>();
  private final List<IdempotentExecutor> executors = new ArrayList<>();
  private final List<JdbcDedupStore> stores = new ArrayList<>();
  private String schema;
  private String topic;
  private String group;

  @BeforeEach
  void setUp() {
    schema = TestPgBouncer.newSchema("pgbouncer_loop");
    String id = UUID.randomUUID().toString().substring(0, 8);
    topic = "payments-" + id;
    group = "billing-" + id;
    TestKafka.createTopics(PARTITIONS, topic);
  }

  @AfterEach
  void tearDown() {
    executors.forEach(IdempotentExecutor::close);
    pools.forEach(HikariDataSource::close);
    if (schema != null) {
      TestPgBouncer.dropSchema(schema);
    }
  }

  @ParameterizedTest(name = "claims per poll: {0}")
  @ValueSource(booleans = {true, false})
  void everyRecordIsAppliedOnceWithoutStatementErrors(boolean claimsPerPoll) throws Exception {
    try (RunningLoop first = RunningLoop.start(loop(claimsPerPoll));
        RunningLoop second = RunningLoop.start(loop(claimsPerPoll))) {
      try (Connection connection = pools.get(0).getConnection()) {
        assertThat(TestPgBouncer.pooled(connection))
            .as("the store's connections are pooled")
            .isTrue();
      }
      // Each order twice (a producer retry's duplicate), on its own partition: every statement
      // text runs far more often than pgjdbc's threshold for naming it.
      Map<TopicPartition, Long> ends = new HashMap<>();
      try (KafkaProducer<String, String> producer = TestKafka.producer()) {
        for (int copy = 0; copy < 2; copy++) {
          for (int i = 0; i < ORDERS; i++) {
            String orderNo = "ORD-" + i;
            int partition = i % PARTITIONS;
            ProducerRecord<String, String> record =
                new ProducerRecord<>(topic, partition, orderNo, "charge " + orderNo);
            record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
            long offset = producer.send(record).get().offset();
            ends.merge(new TopicPartition(topic, partition), offset + 1, Math::max);
          }
        }
      }
      LoopFixture.awaitCommitted(group, ends);
      await().atMost(WAIT).until(() -> effects.size() == ORDERS);
      assertThat(first.isRunning()).as("the first loop runs").isTrue();
      assertThat(second.isRunning()).as("the second loop runs").isTrue();
    }

    assertThat(storeFailures).as("store calls that failed").isEmpty();
    for (JdbcDedupStore store : stores) {
      // A statement error (26000, 42P05, 08P01) would have been retried as transient.
      assertThat(store.retry().getMetrics().getNumberOfSuccessfulCallsWithRetryAttempt())
          .as("store calls retried")
          .isZero();
      assertThat(store.retry().getMetrics().getNumberOfFailedCallsWithRetryAttempt())
          .as("store calls that failed after retries")
          .isZero();
    }
    assertThat(effects).hasSize(ORDERS);
    assertThat(effects.values()).allSatisfy(count -> assertThat(count).hasValue(1));
    for (int i = 0; i < ORDERS; i++) {
      assertThat(stores.get(0).find(DedupKey.of(BIZ_TYPE, "ORD-" + i)))
          .hasValueSatisfying(record -> assertThat(record.attempts()).isEqualTo(1));
    }
  }

  private DedupPollLoop<String, String> loop(boolean claimsPerPoll) {
    HikariDataSource pool = TestPgBouncer.dataSource(4);
    pools.add(pool);
    JdbcDedupStore store =
        JdbcDedupStore.builder(pool).tableName(schema + ".consumer_dedup").build();
    stores.add(store);
    IdempotentExecutor executor =
        IdempotentExecutor.builder(store)
            .listener(
                new DedupListener() {
                  @Override
                  public void storeFailed(DedupKey key, DedupStoreException error) {
                    storeFailures.add(error);
                  }
                })
            .build();
    executors.add(executor);
    IdempotentRecordHandler<String, String> handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(BIZ_TYPE)
            .key(KeyExtractors.header(KEY_HEADER))
            .groupId(group)
            .claimsPerPoll(claimsPerPoll)
            .handler(
                record ->
                    effects
                        .computeIfAbsent(LoopFixture.orderNo(record), k -> new AtomicInteger())
                        .incrementAndGet())
            .build();
    return LoopFixture.quick(
            DedupPollLoop.builder(TestKafka.consumerConfig(group), List.of(topic), handler))
        .deadLetterHandler(
            (record, reason) -> {
              throw new AssertionError("nothing should be dead-lettered: " + reason, reason);
            })
        .build();
  }
}
