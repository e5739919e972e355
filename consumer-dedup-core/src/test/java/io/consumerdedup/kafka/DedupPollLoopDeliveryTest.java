package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupAdmin;
import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupAdmin;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.ConnectionSource;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The ways one business action reaches a consumer more than once (a lost offset commit, a producer
 * duplicate, another consumer still working on it, the database away), through {@link
 * DedupPollLoop} on a real broker and a real PostgreSQL.
 */
class DedupPollLoopDeliveryTest {
  private static final String BIZ_TYPE = "payment";
  private static final String KEY_HEADER = "order-no";
  private static final Duration WAIT = Duration.ofSeconds(20);

  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_delivery");

  private final Effects effects = new Effects();
  private final AtomicInteger duplicates = new AtomicInteger();
  private final AtomicInteger inProgress = new AtomicInteger();
  private IdempotentExecutor executor;
  private String topic;
  private String group;

  @BeforeEach
  void setUp() {
    topic = fixture.topic();
    group = fixture.group();
    executor = executorOver(fixture.store());
  }

  @AfterEach
  void tearDown() {
    executor.close();
  }

  private IdempotentExecutor executorOver(io.consumerdedup.core.DedupStore dedupStore) {
    return IdempotentExecutor.builder(dedupStore)
        .listener(
            new DedupListener() {
              @Override
              public void duplicate(DedupKey key, DedupRecord existing) {
                duplicates.incrementAndGet();
              }

              @Override
              public void inProgress(DedupKey key, DedupRecord existing) {
                inProgress.incrementAndGet();
              }
            })
        .build();
  }

  private IdempotentRecordHandler<String, String> payments(IdempotentExecutor engine) {
    return IdempotentRecordHandler.<String, String>builder(engine)
        .bizType(BIZ_TYPE)
        .key(KeyExtractors.header(KEY_HEADER))
        .groupId(group)
        .handler(record -> effects.apply(orderNo(record)))
        .build();
  }

  private DedupPollLoop<String, String> loop(IdempotentRecordHandler<String, String> handler) {
    return DedupPollLoop.builder(TestKafka.consumerConfig(group), List.of(topic), handler)
        .deadLetterHandler(
            (record, reason) -> {
              throw new AssertionError("Nothing should be dead-lettered here: " + reason, reason);
            })
        .holdBackOff(Duration.ofMillis(100), Duration.ofMillis(200))
        .pollTimeout(Duration.ofMillis(200))
        .build();
  }

  private void send(int partition, String orderNo) throws Exception {
    ProducerRecord<String, String> record =
        new ProducerRecord<>(topic, partition, null, "charge " + orderNo);
    record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(record).get();
  }

  /**
   * A loop over {@code orders} with short back-offs, writing its dead letters to {@code
   * deadLetters}.
   */
  private DedupPollLoop<String, String> quickLoop(
      IdempotentRecordHandler<String, String> orders, List<String> deadLetters) {
    return DedupPollLoop.builder(TestKafka.consumerConfig(group), List.of(topic), orders)
        .deadLetterHandler(
            (record, reason) -> deadLetters.add(orderNo(record) + ": " + reason.getMessage()))
        .retryBackOff(Duration.ofMillis(50))
        .holdBackOff(Duration.ofMillis(100), Duration.ofMillis(200))
        .pollTimeout(Duration.ofMillis(200))
        .build();
  }

  private static String orderNo(ConsumerRecord<String, String> record) {
    return new String(record.headers().lastHeader(KEY_HEADER).value(), StandardCharsets.UTF_8);
  }

  private TopicPartition partition(int number) {
    return new TopicPartition(topic, number);
  }

  @Test
  void aLostOffsetCommitRedeliversTheRecordsButAppliesEachOrderOnce() throws Exception {
    TestKafka.createTopics(1, topic);
    for (String orderNo : List.of("A-1", "A-2", "A-3")) {
      send(0, orderNo);
    }
    IdempotentRecordHandler<String, String> handler = payments(executor);

    // The first consumer handles every record and crashes before committing its offsets.
    try (KafkaConsumer<String, String> crashing =
        new KafkaConsumer<>(TestKafka.consumerConfig(group))) {
      crashing.subscribe(List.of(topic));
      int handled = 0;
      long deadline = System.nanoTime() + WAIT.toNanos();
      while (handled < 3 && System.nanoTime() < deadline) {
        for (ConsumerRecord<String, String> record : crashing.poll(Duration.ofMillis(200))) {
          handler.handle(record);
          handled++;
        }
      }
      assertThat(handled).isEqualTo(3);
    }
    assertThat(TestKafka.committedOffsets(group)).isEmpty();
    assertThat(effects.all())
        .containsOnly(Map.entry("A-1", 1), Map.entry("A-2", 1), Map.entry("A-3", 1));

    try (RunningLoop running = RunningLoop.start(loop(handler))) {
      await()
          .atMost(WAIT)
          .untilAsserted(
              () -> assertThat(TestKafka.committedOffsets(group)).containsEntry(partition(0), 3L));
    }

    assertThat(duplicates).as("redelivered copies recognised as duplicates").hasValue(3);
    assertThat(effects.all())
        .containsOnly(Map.entry("A-1", 1), Map.entry("A-2", 1), Map.entry("A-3", 1));
  }

  @Test
  void theSameOrderSentThreeTimesAtDifferentOffsetsIsAppliedOnce() throws Exception {
    TestKafka.createTopics(1, topic);
    send(0, "B-1");
    send(0, "B-1");
    send(0, "B-2");
    send(0, "B-1");

    try (RunningLoop running = RunningLoop.start(loop(payments(executor)))) {
      await()
          .atMost(WAIT)
          .untilAsserted(
              () -> assertThat(TestKafka.committedOffsets(group)).containsEntry(partition(0), 4L));
    }

    assertThat(effects.all()).containsOnly(Map.entry("B-1", 1), Map.entry("B-2", 1));
    assertThat(duplicates).hasValue(2);
  }

  @Test
  void anOrderHeldByAnotherConsumerIsNotCommittedPastAndIsSkippedOnceThatConsumerSucceeds()
      throws Exception {
    TestKafka.createTopics(2, topic);
    DedupKey held = DedupKey.of(BIZ_TYPE, "C-held");
    ClaimResult.Claimed elsewhere = claimElsewhere(held);
    send(0, "C-held");
    send(0, "C-after");
    send(1, "C-other-partition");

    try (RunningLoop running = RunningLoop.start(loop(payments(executor)))) {
      await()
          .atMost(WAIT)
          .untilAsserted(
              () -> {
                assertThat(TestKafka.committedOffsets(group)).containsEntry(partition(1), 1L);
                assertThat(inProgress).as("in-progress answers").hasValueGreaterThanOrEqualTo(2);
              });
      // The held record was tried more than once and is still blocking its own partition only.
      assertThat(TestKafka.committedOffsets(group)).doesNotContainKey(partition(0));
      assertThat(effects.all()).containsOnly(Map.entry("C-other-partition", 1));

      // The other consumer finishes its work on the order.
      effects.apply("C-held");
      assertThat(fixture.store().complete(elsewhere, Duration.ofDays(1))).isTrue();

      await()
          .atMost(WAIT)
          .untilAsserted(
              () -> assertThat(TestKafka.committedOffsets(group)).containsEntry(partition(0), 2L));
    }
    assertThat(effects.all())
        .containsOnly(
            Map.entry("C-held", 1), Map.entry("C-after", 1), Map.entry("C-other-partition", 1));
    assertThat(duplicates).hasValue(1);
  }

  @Test
  void anOrderHeldByAnotherConsumerIsProcessedOnceThatConsumerFails() throws Exception {
    TestKafka.createTopics(1, topic);
    DedupKey held = DedupKey.of(BIZ_TYPE, "D-held");
    ClaimResult.Claimed elsewhere = claimElsewhere(held);
    send(0, "D-held");

    try (RunningLoop running = RunningLoop.start(loop(payments(executor)))) {
      await().atMost(WAIT).untilAsserted(() -> assertThat(inProgress).hasValueGreaterThan(0));
      assertThat(TestKafka.committedOffsets(group)).isEmpty();

      assertThat(fixture.store().fail(elsewhere, "provider timeout", Duration.ofDays(1))).isTrue();

      await()
          .atMost(WAIT)
          .untilAsserted(
              () -> assertThat(TestKafka.committedOffsets(group)).containsEntry(partition(0), 1L));
    }
    assertThat(effects.all()).containsOnly(Map.entry("D-held", 1));
    DedupRecord record = fixture.store().find(held).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).isEqualTo(2);
  }

  /**
   * A handler that reserves stock idempotently for its order, through the same executor, while
   * another consumer holds the stock's key (a live lease, as a crashed one's is for 5 minutes): the
   * nested call's {@code DedupInProgressException} is not the handler's failure. The order's record
   * is held, its claim given back each time uncounted (its row stays as the first, real failure
   * left it), never dead-lettered however often it is tried; once the holder completes the stock,
   * the order is applied once.
   */
  @Test
  void aNestedCallOnAKeyHeldElsewhereHoldsTheRecordWithoutCountingAttemptsThenAppliesItOnce()
      throws Exception {
    TestKafka.createTopics(1, topic);
    DedupKey stock = DedupKey.of("stock", "N-1");
    ClaimResult.Claimed elsewhere = claimElsewhere(stock);
    AtomicBoolean carrierDown = new AtomicBoolean(true);
    IdempotentRecordHandler<String, String> orders =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(BIZ_TYPE)
            .key(KeyExtractors.header(KEY_HEADER))
            .groupId(group)
            .handler(
                record -> {
                  if (carrierDown.getAndSet(false)) {
                    throw new IllegalStateException("carrier timeout");
                  }
                  executor.execute(
                      DedupKey.of("stock", orderNo(record)),
                      () -> {
                        effects.apply("stock " + orderNo(record));
                        return null;
                      });
                  effects.apply(orderNo(record));
                })
            .build();
    List<String> deadLetters = new CopyOnWriteArrayList<>();
    DedupPollLoop<String, String> loop = quickLoop(orders, deadLetters);
    send(0, "N-1");
    DedupKey order = DedupKey.of(BIZ_TYPE, "N-1");

    try (RunningLoop running = RunningLoop.start(loop)) {
      await()
          .atMost(WAIT)
          .failFast(() -> assertThat(deadLetters).as("dead letters").isEmpty())
          .untilAsserted(
              () ->
                  assertThat(inProgress)
                      .as("the nested call told in progress, twice the attempts allowed")
                      .hasValueGreaterThanOrEqualTo(2 * DedupPollLoop.DEFAULT_MAX_ATTEMPTS));
      assertThat(deadLetters).as("dead letters").isEmpty();
      assertThat(TestKafka.committedOffsets(group)).doesNotContainKey(partition(0));
      assertThat(effects.all()).isEmpty();
      // Read between two tries (a try in hand holds the order PROCESSING for a few milliseconds).
      await()
          .atMost(WAIT)
          .untilAsserted(
              () -> {
                DedupRecord held = fixture.store().find(order).orElseThrow();
                assertThat(held.status()).as("the order's row").isEqualTo(DedupStatus.FAILED);
                assertThat(held.attempts()).as("attempts: the carrier's only").isEqualTo(1);
                assertThat(held.lastError())
                    .hasValueSatisfying(e -> assertThat(e).contains("carrier timeout"));
              });

      effects.apply("stock N-1");
      assertThat(fixture.store().complete(elsewhere, Duration.ofDays(1))).isTrue();

      await()
          .atMost(WAIT)
          .untilAsserted(
              () -> assertThat(TestKafka.committedOffsets(group)).containsEntry(partition(0), 1L));
    }
    assertThat(deadLetters).as("dead letters").isEmpty();
    assertThat(effects.all()).containsOnly(Map.entry("N-1", 1), Map.entry("stock N-1", 1));
    DedupRecord applied = fixture.store().find(order).orElseThrow();
    assertThat(applied.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(applied.attempts()).isEqualTo(2);
  }

  /**
   * A handler whose nested call is on its own record's key meets its own claim, which ends only
   * when the handler does: waiting never helps, so each try counts an attempt, and the record is
   * dead-lettered after {@code maxAttempts}, its effect applied once per attempt and no more, and
   * its partition moves on.
   */
  @Test
  void aNestedCallOnTheRecordsOwnKeyCountsItsAttemptsThenIsDeadLettered() throws Exception {
    assertDeadLetteredAfterItsAttempts(
        "N-2",
        record ->
            executor.execute(
                DedupKey.of(BIZ_TYPE, orderNo(record)),
                () -> {
                  effects.apply("again " + orderNo(record));
                  return null;
                }));
  }

  /**
   * A handler whose nested call is on the key of a later record of its own poll, which this loop
   * claimed with the poll: the key is held by this very executor until that record runs, which it
   * never does while the first is held. Counted, the first is dead-lettered after its attempts and
   * the second is applied; given back uncounted, the partition was held for good and the first
   * record's handler ran again at every back-off.
   */
  @Test
  void aNestedCallOnAKeyItsOwnPollHoldsCountsItsAttemptsThenIsDeadLettered() throws Exception {
    assertDeadLetteredAfterItsAttempts(
        "P-1",
        record -> {
          if (orderNo(record).equals("P-1")) {
            executor.execute(
                DedupKey.of(BIZ_TYPE, "P-2"),
                () -> {
                  effects.apply("nested P-2");
                  return null;
                });
          }
        },
        "P-2");
    assertThat(effects.count("P-2")).as("runs of the later record's handler").isEqualTo(1);
  }

  /**
   * A handler that always throws a retry-later exception waiting does not cure (here a nested call
   * refused as misconfigured) counts its attempts and is dead-lettered after {@code maxAttempts}.
   */
  @Test
  void aHandlerAlwaysThrowingAConfigurationErrorIsDeadLetteredAfterItsAttempts() throws Exception {
    assertDeadLetteredAfterItsAttempts(
        "C-1",
        record -> {
          throw new DedupConfigurationException(
              "no executor for the nested call", DedupKey.of("stock", orderNo(record)), null);
        });
  }

  /**
   * Sends {@code orderNo}, then {@code sentAfter}, to a handler that applies each and then runs
   * {@code thenFails}, which throws every time for {@code orderNo}: dead-lettered once its attempts
   * are spent, applied at most that often, and the records after it committed.
   */
  private void assertDeadLetteredAfterItsAttempts(
      String orderNo, RecordHandler<String, String> thenFails, String... sentAfter)
      throws Exception {
    TestKafka.createTopics(1, topic);
    IdempotentRecordHandler<String, String> orders =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(BIZ_TYPE)
            .key(KeyExtractors.header(KEY_HEADER))
            .groupId(group)
            .handler(
                record -> {
                  effects.apply(orderNo(record));
                  thenFails.handle(record);
                })
            .build();
    List<String> deadLetters = new CopyOnWriteArrayList<>();
    DedupPollLoop<String, String> loop = quickLoop(orders, deadLetters);
    send(0, orderNo);
    for (String later : sentAfter) {
      send(0, later);
    }
    int maxAttempts = DedupPollLoop.DEFAULT_MAX_ATTEMPTS;

    try (RunningLoop running = RunningLoop.start(loop)) {
      await()
          .atMost(WAIT)
          .failFast(
              () ->
                  assertThat(effects.count(orderNo))
                      .as("runs of the handler, with %s attempts allowed", maxAttempts)
                      .isLessThanOrEqualTo(maxAttempts))
          .untilAsserted(() -> assertThat(deadLetters).as("dead letters").hasSize(1));
      await()
          .atMost(WAIT)
          .untilAsserted(
              () ->
                  assertThat(TestKafka.committedOffsets(group))
                      .containsEntry(partition(0), 1L + sentAfter.length));
    }
    assertThat(deadLetters.get(0)).startsWith(orderNo + ": ");
    assertThat(effects.count(orderNo)).as("runs of the handler").isEqualTo(maxAttempts);
    assertThat(fixture.store().find(DedupKey.of(BIZ_TYPE, orderNo)))
        .hasValueSatisfying(
            row -> {
              assertThat(row.status()).isEqualTo(DedupStatus.FAILED);
              assertThat(row.attempts()).as("attempts").isEqualTo(maxAttempts);
            });
  }

  /**
   * A key whose record a newer version wrote with a status of its own (a rolling upgrade, its
   * migration having widened the status check) is held as one in progress elsewhere: neither
   * handled nor dead-lettered, its partition not committed past, while another partition's key is
   * applied; once an operator forgets it (forced), its record is applied once.
   */
  @Test
  void anOrderWhoseStatusANewerVersionWroteIsHeldUntilForgottenThenAppliedOnce() throws Exception {
    TestKafka.createTopics(2, topic);
    DedupKey held = DedupKey.of(BIZ_TYPE, "U-held");
    claimElsewhere(held);
    try (Connection connection = fixture.dataSource().getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute(
          "ALTER TABLE consumer_dedup DROP CONSTRAINT IF EXISTS consumer_dedup_status_ck");
      statement.execute(
          "UPDATE consumer_dedup SET status = 'ABANDONED', lease_until = NULL"
              + " WHERE biz_key = 'U-held'");
    }
    send(0, "U-held");
    send(1, "U-other");
    List<String> deadLetters = new CopyOnWriteArrayList<>();
    DedupPollLoop<String, String> loop =
        DedupPollLoop.builder(TestKafka.consumerConfig(group), List.of(topic), payments(executor))
            .deadLetterHandler((record, reason) -> deadLetters.add(orderNo(record)))
            .holdBackOff(Duration.ofMillis(100), Duration.ofMillis(200))
            .pollTimeout(Duration.ofMillis(200))
            .build();

    try (RunningLoop running = RunningLoop.start(loop)) {
      await()
          .atMost(WAIT)
          .untilAsserted(
              () -> {
                assertThat(TestKafka.committedOffsets(group)).containsEntry(partition(1), 1L);
                assertThat(inProgress).as("holds of U-held").hasValueGreaterThanOrEqualTo(3);
              });
      assertThat(TestKafka.committedOffsets(group)).doesNotContainKey(partition(0));
      assertThat(effects.all()).containsOnly(Map.entry("U-other", 1));
      assertThat(deadLetters).as("dead letters").isEmpty();

      DedupAdmin.Change forgot = JdbcDedupAdmin.of(fixture.store()).forget(held, "ops", true);
      assertThat(forgot.applied()).as(forgot.message()).isTrue();

      await()
          .atMost(WAIT)
          .untilAsserted(
              () -> assertThat(TestKafka.committedOffsets(group)).containsEntry(partition(0), 1L));
    }
    assertThat(effects.all()).containsOnly(Map.entry("U-held", 1), Map.entry("U-other", 1));
    assertThat(deadLetters).as("dead letters").isEmpty();
    assertThat(fixture.store().find(held).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aRecordIsNeitherLostNorSkippedWhileTheDatabaseIsDown() throws Exception {
    TestKafka.createTopics(1, topic);
    SwitchableDataSource switchable = new SwitchableDataSource(fixture.dataSource());
    JdbcDedupStore fragileStore =
        JdbcDedupStore.builder(switchable)
            .retryMaxAttempts(2)
            .retryInitialBackoff(Duration.ofMillis(10))
            .retryMaxBackoff(Duration.ofMillis(20))
            .build();
    switchable.down.set(true);
    send(0, "E-1");
    send(0, "E-2");

    try (IdempotentExecutor fragile = executorOver(fragileStore);
        RunningLoop running = RunningLoop.start(loop(payments(fragile)))) {
      // Several claims failed (each after the store's own retries), spread over hold back-offs.
      await().atMost(WAIT).until(() -> switchable.refused.get() >= 6);
      assertThat(running.isRunning()).isTrue();
      assertThat(TestKafka.committedOffsets(group)).isEmpty();
      assertThat(effects.all()).isEmpty();

      switchable.down.set(false);

      await()
          .atMost(WAIT)
          .untilAsserted(
              () -> assertThat(TestKafka.committedOffsets(group)).containsEntry(partition(0), 2L));
    }
    assertThat(effects.all()).containsOnly(Map.entry("E-1", 1), Map.entry("E-2", 1));
  }

  @Test
  void stoppingFinishesTheRecordInHandCommitsItAndAnotherLoopResumesAfterIt() throws Exception {
    TestKafka.createTopics(1, topic);
    CountDownLatch inHandler = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    IdempotentRecordHandler<String, String> slowOnSecond =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(BIZ_TYPE)
            .key(KeyExtractors.header(KEY_HEADER))
            .handler(
                record -> {
                  if (orderNo(record).equals("S-2")) {
                    inHandler.countDown();
                    assertThat(release.await(20, TimeUnit.SECONDS)).isTrue();
                  }
                  effects.apply(orderNo(record));
                })
            .build();
    send(0, "S-1");
    send(0, "S-2");
    send(0, "S-3");

    DedupPollLoop<String, String> first = loop(slowOnSecond);
    try (RunningLoop running = RunningLoop.start(first)) {
      assertThat(inHandler.await(20, TimeUnit.SECONDS)).isTrue();
      first.stop();
      release.countDown();
    }

    assertThat(TestKafka.committedOffsets(group)).containsEntry(partition(0), 2L);
    assertThat(effects.all()).containsOnly(Map.entry("S-1", 1), Map.entry("S-2", 1));

    try (RunningLoop second = RunningLoop.start(loop(slowOnSecond))) {
      await()
          .atMost(WAIT)
          .untilAsserted(
              () -> assertThat(TestKafka.committedOffsets(group)).containsEntry(partition(0), 3L));
    }
    assertThat(effects.all())
        .containsOnly(Map.entry("S-1", 1), Map.entry("S-2", 1), Map.entry("S-3", 1));
    assertThat(duplicates).hasValue(0);
  }

  @Test
  void interruptingTheLoopsThreadStopsItCleanly() throws Exception {
    TestKafka.createTopics(1, topic);
    send(0, "I-1");
    ExecutorService pollThread = Executors.newSingleThreadExecutor();
    Future<?> run = pollThread.submit(loop(payments(executor)));
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> assertThat(TestKafka.committedOffsets(group)).containsEntry(partition(0), 1L));

    pollThread.shutdownNow();

    assertThat(pollThread.awaitTermination(20, TimeUnit.SECONDS)).isTrue();
    assertThat(run).isDone();
    run.get(); // completed normally: no exception escaped the loop
    send(0, "I-2");
    try (RunningLoop next = RunningLoop.start(loop(payments(executor)))) {
      await()
          .atMost(WAIT)
          .untilAsserted(
              () -> assertThat(TestKafka.committedOffsets(group)).containsEntry(partition(0), 2L));
    }
    assertThat(effects.all()).containsOnly(Map.entry("I-1", 1), Map.entry("I-2", 1));
  }

  /** Another consumer instance claims the key and is still working on it (a live lease). */
  private static ClaimResult.Claimed claimElsewhere(DedupKey key) {
    ClaimResult claim =
        fixture
            .store()
            .claim(
                new ClaimRequest(
                    key, "other-consumer", Duration.ofMinutes(5), Duration.ofDays(1), null, null));
    assertThat(claim).isInstanceOf(ClaimResult.Claimed.class);
    return (ClaimResult.Claimed) claim;
  }

  /** A DataSource whose database can be made unreachable, as a network outage makes it. */
  private static final class SwitchableDataSource extends ConnectionSource {
    private final DataSource delegate;
    final AtomicBoolean down = new AtomicBoolean();
    final AtomicInteger refused = new AtomicInteger();

    SwitchableDataSource(DataSource delegate) {
      this.delegate = delegate;
    }

    private void checkUp() throws SQLException {
      if (down.get()) {
        refused.incrementAndGet();
        throw new SQLException("Connection refused (database down in this test)", "08001");
      }
    }

    @Override
    public Connection getConnection() throws SQLException {
      checkUp();
      return delegate.getConnection();
    }
  }
}
