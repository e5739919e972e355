package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.KEY_HEADER;
import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import java.lang.ref.WeakReference;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Memory stays flat: once its records are handled and committed, nothing of the loop, the handler
 * or the executor keeps a key, except the executor's bounded memory of its last claims (4096 keys,
 * to notice a record that vanished under a claim). Each key the extractor hands out is watched by a
 * weak reference; after the run (the executor still open) and a garbage collection, at most that
 * many are still reachable, whatever the number of records.
 */
class DedupPollLoopRetainedStateTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_retained");

  /**
   * Half as many again as the claims the executor remembers: a loop, handler or executor keeping
   * every key it saw would be over the bound by 1,904 keys.
   */
  private static final int RECORDS = 6_000;

  /** RecentClaims.CAPACITY: the keys the executor remembers on purpose. */
  private static final int REMEMBERED_CLAIMS = 4096;

  private final ExecutorService threads = Executors.newCachedThreadPool();
  private final List<WeakReference<String>> handedOut = new CopyOnWriteArrayList<>();

  @AfterEach
  void tearDown() throws InterruptedException {
    threads.shutdownNow();
    threads.awaitTermination(30, TimeUnit.SECONDS);
  }

  @ParameterizedTest(name = "claims per poll: {0}")
  @ValueSource(booleans = {false, true})
  void afterManyRecordsOnlyABoundedNumberOfKeysIsStillReachable(boolean claimsPerPoll)
      throws Exception {
    TestKafka.createTopics(2, fixture.topic());
    for (int i = 0; i < RECORDS; i++) {
      String orderNo = fixture.topic() + "-ORD-" + i;
      ProducerRecord<String, String> record =
          new ProducerRecord<>(fixture.topic(), i % 2, orderNo, "charge " + orderNo);
      record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
      fixture.producer().send(record);
    }
    fixture.producer().flush();
    KeyExtractor<String, String> watched =
        record ->
            KeyExtractors.<String, String>header(KEY_HEADER)
                .extract(record)
                .map(
                    key -> {
                      String own = new String(key.toCharArray());
                      handedOut.add(new WeakReference<>(own));
                      return own;
                    });

    try (HikariDataSource unflushed = withoutWaitingForFlushes();
        IdempotentExecutor executor =
            IdempotentExecutor.builder(JdbcDedupStore.builder(unflushed).build()).build()) {
      IdempotentRecordHandler<String, String> handler =
          IdempotentRecordHandler.<String, String>builder(executor)
              .bizType(BIZ_TYPE)
              .key(watched)
              .claimsPerPoll(claimsPerPoll)
              .handler(record -> {})
              .build();
      try (DedupPollLoop<String, String> loop =
          LoopFixture.quick(
                  DedupPollLoop.builder(
                      TestKafka.consumerConfig(fixture.group()), List.of(fixture.topic()), handler))
              .deadLetterHandler(
                  (record, reason) -> {
                    throw new AssertionError("nothing should be dead-lettered: " + reason);
                  })
              .build()) {
        threads.submit(loop);
        LoopFixture.awaitCommitted(
            fixture.group(),
            Map.of(
                new TopicPartition(fixture.topic(), 0), (long) RECORDS / 2,
                new TopicPartition(fixture.topic(), 1), (long) RECORDS / 2),
            // A test of what is kept, not of speed: 9,000 records one claim each once took more
            // than 20 s on 2 loaded cores.
            Duration.ofMinutes(3));
      }

      assertThat(executor.unrecordedOutcomes()).isEmpty();
      long reachable = reachableAfterCollection();
      assertThat(handedOut.size()).as("keys handed out").isGreaterThanOrEqualTo(RECORDS);
      assertThat(reachable)
          .as("keys still reachable after %,d records", RECORDS)
          .isLessThanOrEqualTo(REMEMBERED_CLAIMS);
    }
  }

  /**
   * The fixture's schema, on connections whose commits do not wait for the disk: this test counts
   * what is kept, and one flush per record made the path that claims record by record take 40 s.
   */
  private static HikariDataSource withoutWaitingForFlushes() {
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(TestDatabase.url(fixture.schema()));
    config.setMaximumPoolSize(4);
    config.setConnectionInitSql("SET synchronous_commit = off");
    return new HikariDataSource(config);
  }

  private long reachableAfterCollection() throws InterruptedException {
    long reachable = Long.MAX_VALUE;
    for (int i = 0; i < 10 && reachable > REMEMBERED_CLAIMS; i++) {
      System.gc();
      Thread.sleep(100);
      reachable = handedOut.stream().filter(reference -> reference.get() != null).count();
    }
    return reachable;
  }
}
