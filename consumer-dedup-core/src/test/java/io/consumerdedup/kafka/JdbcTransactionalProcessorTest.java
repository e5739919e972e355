package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.WAIT;
import static io.consumerdedup.kafka.LoopFixture.orderNo;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupAdmin;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.TransactionBoundDataSource;
import io.consumerdedup.micrometer.MicrometerDedupListener;
import io.consumerdedup.testing.FaultyDataSource;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Mode TRANSACTIONAL for a plain consumer: {@link DedupPollLoop} running an {@link
 * IdempotentRecordHandler} inside {@link JdbcTransactionalProcessor}, whose handler books a charge
 * row through the same {@link TransactionBoundDataSource} as the dedup store's claim. What a user
 * counts: charge rows, and the dedup row of each order.
 */
class JdbcTransactionalProcessorTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_transactional");

  private final List<Exception> deadLettered = new CopyOnWriteArrayList<>();
  private final List<AutoCloseable> resources = new ArrayList<>();
  private TransactionBoundDataSource transactions;

  @BeforeAll
  static void createChargesTable() throws SQLException {
    try (Connection connection = fixture.dataSource().getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute(
          "CREATE TABLE charges (order_no text NOT NULL, booked_by text NOT NULL, booked_at"
              + " timestamptz NOT NULL DEFAULT clock_timestamp())");
      // The commit of the first charge of an order named COMMIT-FAILS-... fails, as a serialization
      // failure or a deferred constraint makes a real commit fail; the sequence, outside any
      // transaction, remembers that it did.
      statement.execute("CREATE SEQUENCE failed_commits");
      statement.execute(
          """
          CREATE FUNCTION fail_first_commit() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN
            IF NEW.order_no LIKE 'COMMIT-FAILS-%' AND nextval('failed_commits') = 1 THEN
              RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001';
            END IF;
            RETURN NULL;
          END $$""");
      statement.execute(
          "CREATE CONSTRAINT TRIGGER fail_first_commit AFTER INSERT ON charges"
              + " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_first_commit()");
    }
  }

  @BeforeEach
  void setUp() {
    TestKafka.createTopics(1, fixture.topic());
    transactions = TransactionBoundDataSource.of(fixture.dataSource());
  }

  @AfterEach
  void tearDown() throws Exception {
    for (int i = resources.size() - 1; i >= 0; i--) {
      resources.get(i).close();
    }
    assertThat(deadLettered).as("nothing is dead-lettered here").isEmpty();
  }

  /** The payment consumer in mode TRANSACTIONAL: books the charge row, then {@code afterCharge}. */
  private RecordProcessor<String, String> payments(
      TransactionBoundDataSource over, String bookedBy, ChargeStep afterCharge) {
    return payments(over, bookedBy, afterCharge, DedupListener.NOOP);
  }

  /** As above, its executor telling {@code listener} of its events. */
  private RecordProcessor<String, String> payments(
      TransactionBoundDataSource over,
      String bookedBy,
      ChargeStep afterCharge,
      DedupListener listener) {
    IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(over).build())
            .mode(DedupMode.TRANSACTIONAL)
            .listener(listener)
            .build();
    resources.add(executor);
    IdempotentRecordHandler<String, String> handler =
        LoopFixture.handler(executor)
            .groupId(bookedBy)
            .handler(
                record -> {
                  try (Connection connection = over.getConnection();
                      PreparedStatement charge =
                          connection.prepareStatement(
                              "INSERT INTO charges (order_no, booked_by) VALUES (?, ?)")) {
                    charge.setString(1, orderNo(record));
                    charge.setString(2, bookedBy);
                    charge.executeUpdate();
                  }
                  afterCharge.run(orderNo(record));
                })
            .build();
    return JdbcTransactionalProcessor.of(over, handler);
  }

  /** What the handler does once it has booked the charge, inside the record's transaction. */
  @FunctionalInterface
  private interface ChargeStep {
    void run(String orderNo) throws Exception;
  }

  private DedupPollLoop<String, String> loop(String group, RecordProcessor<String, String> p) {
    return LoopFixture.quick(
            DedupPollLoop.builder(TestKafka.consumerConfig(group), List.of(fixture.topic()), p)
                .deadLetterHandler((record, reason) -> deadLettered.add(reason)))
        .build();
  }

  private void send(String orderNo) throws Exception {
    JdbcTransactionalLoops.send(fixture, orderNo);
  }

  private void awaitCommitted(String group, long offset) {
    LoopFixture.awaitCommitted(group, Map.of(new TopicPartition(fixture.topic(), 0), offset));
  }

  /** The charge rows of the order, committed: who booked each. */
  private static List<String> charges(String orderNo) throws SQLException {
    return charges(fixture.dataSource(), orderNo);
  }

  private static List<String> charges(DataSource dataSource, String orderNo) throws SQLException {
    try (Connection connection = dataSource.getConnection();
        PreparedStatement query =
            connection.prepareStatement("SELECT booked_by FROM charges WHERE order_no = ?")) {
      query.setString(1, orderNo);
      try (ResultSet rows = query.executeQuery()) {
        List<String> bookedBy = new ArrayList<>();
        while (rows.next()) {
          bookedBy.add(rows.getString(1));
        }
        return bookedBy;
      }
    }
  }

  private static DedupRecord dedupRecord(String orderNo) {
    return fixture.store().find(DedupKey.of(BIZ_TYPE, orderNo)).orElseThrow();
  }

  @Test
  void aHandlerThatBooksAChargeLeavesOneChargeAndItsDedupRowSuccess() throws Exception {
    send("T-1");
    try (RunningLoop running =
        RunningLoop.start(loop(fixture.group(), payments(transactions, "billing", order -> {})))) {
      awaitCommitted(fixture.group(), 1);
    }

    assertThat(charges("T-1")).containsExactly("billing");
    assertThat(dedupRecord("T-1").status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(dedupRecord("T-1").attempts()).isEqualTo(1);
  }

  @Test
  void aRedeliveredRecordAndARepeatedOrderBookNoSecondCharge() throws Exception {
    send("T-2");
    send("T-2"); // the producer retried
    AtomicInteger handlerRuns = new AtomicInteger();
    RecordProcessor<String, String> payments =
        payments(transactions, "billing", order -> handlerRuns.incrementAndGet());
    try (RunningLoop running = RunningLoop.start(loop(fixture.group(), payments))) {
      awaitCommitted(fixture.group(), 2);
    }
    // Someone replays the topic: the group reads both records again.
    rewind(fixture.group());
    try (RunningLoop running = RunningLoop.start(loop(fixture.group(), payments))) {
      awaitCommitted(fixture.group(), 2);
    }

    assertThat(handlerRuns).hasValue(1);
    assertThat(charges("T-2")).containsExactly("billing");
    assertThat(dedupRecord("T-2").status()).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aPollCommitsInOneTransactionAndARecordThatFailsIsRetriedAloneWhileTheRestCommit()
      throws Exception {
    for (int i = 0; i < 20; i++) {
      send("P-" + i);
    }
    AtomicInteger failuresLeft = new AtomicInteger(1);
    RecordProcessor<String, String> payments =
        payments(
            transactions,
            "billing",
            order -> {
              if (order.equals("P-7") && failuresLeft.getAndDecrement() > 0) {
                throw new IllegalStateException("ledger rejected the charge");
              }
            });
    try (RunningLoop running = RunningLoop.start(loop(fixture.group(), payments))) {
      awaitCommitted(fixture.group(), 20);
    }
    send("P-20");
    send("P-21");
    send("P-22");
    try (RunningLoop running = RunningLoop.start(loop(fixture.group(), payments))) {
      awaitCommitted(fixture.group(), 23);
    }

    assertThat(failuresLeft.get()).as("P-7 failed once").isNegative();
    for (int i = 0; i < 23; i++) {
      assertThat(charges("P-" + i)).as("charges of P-" + i).containsExactly("billing");
    }
    // The second poll's three charges and their dedup rows went in one transaction.
    assertThat(transactionsOf("P-20", "P-21", "P-22")).isEqualTo(1);
  }

  /**
   * A record of the poll fails, and the poll's transaction, which had applied the others, rolls
   * back; each record then runs in a transaction of its own. The others had been counted
   * "processed" as their handlers returned inside the transaction that rolled back, and were
   * counted again as they committed alone: the metric said 2 for records applied once.
   */
  @Test
  void aRecordAppliedOnceIsCountedProcessedOnceThoughThePollsTransactionRolledBack()
      throws Exception {
    for (int i = 0; i < 3; i++) {
      send("M-" + i);
    }
    SimpleMeterRegistry registry = new SimpleMeterRegistry();
    AtomicInteger failuresLeft = new AtomicInteger(1);
    RecordProcessor<String, String> payments =
        payments(
            transactions,
            "billing",
            order -> {
              if (order.equals("M-2") && failuresLeft.getAndDecrement() > 0) {
                throw new IllegalStateException("ledger rejected the charge");
              }
            },
            new MicrometerDedupListener(registry));
    try (RunningLoop running = RunningLoop.start(loop(fixture.group(), payments))) {
      awaitCommitted(fixture.group(), 3);
    }

    for (int i = 0; i < 3; i++) {
      assertThat(charges("M-" + i)).as("charges of M-" + i).containsExactly("billing");
    }
    assertThat(
            registry
                .get(MicrometerDedupListener.OUTCOMES)
                .tag("outcome", "processed")
                .counter()
                .count())
        .as("records counted processed, of 3 applied once each")
        .isEqualTo(3.0);
  }

  /** How many transactions wrote the charges and dedup rows of these orders. */
  private static int transactionsOf(String... orderNos) throws SQLException {
    try (Connection connection = fixture.dataSource().getConnection();
        PreparedStatement query =
            connection.prepareStatement(
                "SELECT count(DISTINCT x) FROM (SELECT xmin::text AS x FROM charges WHERE order_no"
                    + " = ANY (?) UNION ALL SELECT xmin::text FROM consumer_dedup WHERE biz_key ="
                    + " ANY (?)) written")) {
      query.setArray(1, connection.createArrayOf("text", orderNos));
      query.setArray(2, connection.createArrayOf("text", orderNos));
      try (ResultSet row = query.executeQuery()) {
        row.next();
        return row.getInt(1);
      }
    }
  }

  /** Moves the (idle) group's committed offset back to the start of the topic. */
  private void rewind(String group) throws Exception {
    try (Admin admin =
        Admin.create(
            Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, TestKafka.bootstrapServers()))) {
      admin
          .alterConsumerGroupOffsets(
              group, Map.of(new TopicPartition(fixture.topic(), 0), new OffsetAndMetadata(0)))
          .all()
          .get();
    }
    assertThat(TestKafka.committedOffsets(group))
        .containsEntry(new TopicPartition(fixture.topic(), 0), 0L);
  }

  @Test
  void aHandlerThatBooksThenThrowsLeavesNeitherRowAndTheRetryBooksOnce() throws Exception {
    send("T-3");
    AtomicInteger attempts = new AtomicInteger();
    List<String> seenByTheRetry = new CopyOnWriteArrayList<>();
    RecordProcessor<String, String> payments =
        payments(
            transactions,
            "billing",
            order -> {
              if (attempts.incrementAndGet() == 1) {
                throw new IllegalStateException("bank answered 503 after the charge was booked");
              }
              // What the first attempt left behind, seen from outside this attempt's transaction.
              seenByTheRetry.add(charges(order).size() + " charges");
              seenByTheRetry.add(
                  fixture
                      .store()
                      .find(DedupKey.of(BIZ_TYPE, order))
                      .map(r -> "a dedup row")
                      .orElse("no dedup row"));
            });
    try (RunningLoop running = RunningLoop.start(loop(fixture.group(), payments))) {
      awaitCommitted(fixture.group(), 1);
    }

    assertThat(attempts).hasValue(2);
    assertThat(seenByTheRetry).containsExactly("0 charges", "no dedup row");
    assertThat(charges("T-3")).containsExactly("billing");
    assertThat(dedupRecord("T-3").status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(dedupRecord("T-3").attempts())
        .as("the failed attempt's claim was rolled back with its charge")
        .isEqualTo(1);
  }

  @Test
  void twoServicesRacingOnOneOrderBookItOnce() throws Exception {
    send("T-4");
    String groupA = fixture.group() + "-a";
    String groupB = fixture.group() + "-b";
    TransactionBoundDataSource overA = TransactionBoundDataSource.of(namedPool(groupA));
    TransactionBoundDataSource overB = TransactionBoundDataSource.of(namedPool(groupB));
    CountDownLatch aBooked = new CountDownLatch(1);
    CountDownLatch releaseA = new CountDownLatch(1);
    AtomicInteger bRuns = new AtomicInteger();
    RecordProcessor<String, String> paymentsA =
        payments(
            overA,
            "service A",
            order -> {
              aBooked.countDown();
              assertThat(releaseA.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();
            });
    RecordProcessor<String, String> paymentsB =
        payments(overB, "service B", order -> bRuns.incrementAndGet());

    try (RunningLoop a = RunningLoop.start(loop(groupA, paymentsA))) {
      assertThat(aBooked.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();
      try (RunningLoop b = RunningLoop.start(loop(groupB, paymentsB))) {
        // B's claim waits on the key A inserted and has not committed yet.
        await().atMost(WAIT).until(() -> waitingOnALock(groupB));
        releaseA.countDown();
        awaitCommitted(groupA, 1);
        awaitCommitted(groupB, 1);
      }
    }

    assertThat(charges("T-4")).containsExactly("service A");
    assertThat(bRuns).as("B's handler never ran: A's commit made B's copy a duplicate").hasValue(0);
    assertThat(dedupRecord("T-4").status()).isEqualTo(DedupStatus.SUCCESS);
  }

  /** A pool whose sessions carry {@code name}, so the test can watch them in pg_stat_activity. */
  private HikariDataSource namedPool(String name) {
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(TestDatabase.url(fixture.schema()) + "&ApplicationName=" + name);
    config.setMaximumPoolSize(2);
    HikariDataSource pool = new HikariDataSource(config);
    resources.add(pool);
    return pool;
  }

  private static boolean waitingOnALock(String applicationName) throws SQLException {
    try (Connection connection = fixture.dataSource().getConnection();
        PreparedStatement query =
            connection.prepareStatement(
                "SELECT count(*) FROM pg_stat_activity"
                    + " WHERE application_name = ? AND wait_event_type = 'Lock'")) {
      query.setString(1, applicationName);
      try (ResultSet row = query.executeQuery()) {
        row.next();
        return row.getInt(1) > 0;
      }
    }
  }

  @Test
  void aCommitThatFailsHoldsTheRecordAndTheRetryBooksOnce() throws Exception {
    send("COMMIT-FAILS-1");
    AtomicInteger handlerRuns = new AtomicInteger();
    try (RunningLoop running =
        RunningLoop.start(
            loop(
                fixture.group(),
                payments(transactions, "billing", order -> handlerRuns.incrementAndGet())))) {
      awaitCommitted(fixture.group(), 1);
    }

    assertThat(handlerRuns).as("the first run's commit failed; the retry ran again").hasValue(2);
    assertThat(charges("COMMIT-FAILS-1")).containsExactly("billing");
    assertThat(dedupRecord("COMMIT-FAILS-1").status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(dedupRecord("COMMIT-FAILS-1").attempts()).isEqualTo(1);
  }

  @Test
  void aCommitWhoseReplyIsLostIsFoundCommittedByTheRetry() throws Exception {
    send("T-5");
    AtomicInteger handlerRuns = new AtomicInteger();
    try (FaultyDataSource faulty =
        FaultyDataSource.on(fixture.schema(), 2, Duration.ofSeconds(2))) {
      TransactionBoundDataSource overFaulty = TransactionBoundDataSource.of(faulty);
      RecordProcessor<String, String> payments =
          payments(overFaulty, "billing", order -> handlerRuns.incrementAndGet());
      faulty.loseCommitReplyOnce();
      try (RunningLoop running = RunningLoop.start(loop(fixture.group(), payments))) {
        awaitCommitted(fixture.group(), 1);
      }
      assertThat(faulty.repliesLost()).as("the commit's reply was lost").isEqualTo(1);
    }

    assertThat(handlerRuns).as("the retry found the dedup row committed: a duplicate").hasValue(1);
    assertThat(charges("T-5")).containsExactly("billing");
    assertThat(dedupRecord("T-5").status()).isEqualTo(DedupStatus.SUCCESS);
  }

  /**
   * A handler throws an {@code Error} (an {@code AssertionError}, a {@code StackOverflowError}) for
   * one record of a poll run in one transaction. The {@code Error} escaped the poll's transaction
   * before the loop reached any record: nothing of the poll was committed, not even the record
   * before it, and the record was neither counted as a failed attempt nor dead-lettered, so every
   * loop the application started ended the same way on the same poll. Now the poll falls back to a
   * transaction per record, as for an exception, and the loop treats the {@code Error} as it does
   * outside a transaction.
   */
  @Test
  void aHandlerErrorInThePollsTransactionIsThatRecordsFailureNotThePolls() throws Exception {
    send("E-0");
    send("E-1-BROKEN");
    send("E-2");
    AtomicInteger errors = new AtomicInteger();
    RecordProcessor<String, String> payments =
        payments(transactions, "billing", brokenFor("E-1-BROKEN", errors));
    List<Exception> givenUp = new CopyOnWriteArrayList<>();
    Throwable end = runToItsEnd(attempts(1, payments, givenUp));

    assertThat(errors).as("the handler threw its Error").hasPositiveValue();
    assertThat(end).as("the loop ends with the handler's Error").isInstanceOf(AssertionError.class);
    assertThat(TestKafka.committedOffsets(fixture.group()))
        .as("committed: the record before it, and it, dead-lettered")
        .containsEntry(new TopicPartition(fixture.topic(), 0), 2L);
    assertThat(givenUp)
        .singleElement()
        .satisfies(reason -> assertThat(reason).hasRootCauseInstanceOf(AssertionError.class));
    assertThat(charges("E-0")).containsExactly("billing");
    assertThat(charges("E-1-BROKEN")).isEmpty();

    try (RunningLoop next = RunningLoop.start(loop(fixture.group(), payments))) {
      awaitCommitted(fixture.group(), 3);
    }
    assertThat(charges("E-2")).containsExactly("billing");
  }

  /**
   * A record that failed an attempt and then committed on its retry (run alone, as a record with a
   * failed attempt is), later replayed with the same processor: the commit dropped the processor's
   * count, so the replay's first failure is its first attempt, not its last.
   */
  @Test
  void aReplayedRecordGetsItsFullAttemptsAfterItsRetryCommitted() throws Exception {
    send("R-1");
    // One failed attempt: in the poll's transaction, then alone.
    AtomicInteger failuresLeft = new AtomicInteger(2);
    AtomicInteger failures = new AtomicInteger();
    RecordProcessor<String, String> payments =
        payments(
            transactions,
            "billing",
            order -> {
              if (failuresLeft.getAndDecrement() > 0) {
                failures.incrementAndGet();
                throw new IllegalStateException("ledger rejected the charge");
              }
            });
    List<Exception> givenUp = new CopyOnWriteArrayList<>();
    // The first attempt fails; the retry runs in a transaction of its own and commits.
    try (RunningLoop running = RunningLoop.start(attempts(2, payments, givenUp))) {
      awaitCommitted(fixture.group(), 1);
    }
    assertThat(charges("R-1")).containsExactly("billing");
    // An operator undoes the charge, forgets the key and replays the topic, with the same
    // processor still running the group; the replay fails once, as the first delivery did.
    try (Connection connection = fixture.dataSource().getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute("DELETE FROM charges WHERE order_no = 'R-1'");
    }
    JdbcDedupAdmin.of(fixture.store()).forget(DedupKey.of(BIZ_TYPE, "R-1"), "operator", false);
    rewind(fixture.group());
    failuresLeft.set(2);
    try (RunningLoop running = RunningLoop.start(attempts(2, payments, givenUp))) {
      await().atMost(WAIT).until(() -> !charges("R-1").isEmpty() || !givenUp.isEmpty());
    }

    assertThat(failures).as("each delivery failed one attempt, run twice").hasValue(4);
    assertThat(givenUp)
        .as("the replay's first failure is its first attempt of two, not its last")
        .isEmpty();
    assertThat(charges("R-1")).containsExactly("billing");
  }

  @Test
  void aHandlerThatOpensItsOwnTransactionInsideTheRecordsIsHeldNotDeadLettered() throws Exception {
    send("N-1");
    List<Exception> refused = new CopyOnWriteArrayList<>();
    // A ledger that wraps its writes in a transaction of its own, as it does when called alone.
    RecordProcessor<String, String> payments =
        payments(
            transactions,
            "billing",
            order -> {
              try {
                transactions.inTransaction(() -> "booked");
              } catch (RuntimeException e) {
                refused.add(e);
                throw e;
              }
            });
    List<Exception> givenUp = new CopyOnWriteArrayList<>();
    try (RunningLoop running = RunningLoop.start(attempts(2, payments, givenUp))) {
      await().atMost(WAIT).until(() -> refused.size() >= 3 || !givenUp.isEmpty());
    }

    assertThat(refused).as("the nested transaction was refused").isNotEmpty();
    assertThat(givenUp)
        .as("a set-up mistake holds the record until the application is fixed")
        .isEmpty();
    assertThat(charges("N-1")).isEmpty();
    assertThat(
            TestKafka.committedOffsets(fixture.group())
                .getOrDefault(new TopicPartition(fixture.topic(), 0), 0L))
        .as("nothing committed past the record")
        .isZero();
  }

  @Test
  void aTransactionalStoreOverThePoolItselfHoldsTheRecordInsteadOfDeadLetteringIt()
      throws Exception {
    send("M-1");
    // The mistake: the store given the pool, and no JdbcTransactionalProcessor around the handler.
    IdempotentExecutor overThePool =
        IdempotentExecutor.builder(JdbcDedupStore.builder(fixture.dataSource()).build())
            .mode(DedupMode.TRANSACTIONAL)
            .build();
    resources.add(overThePool);
    AtomicInteger handlerRuns = new AtomicInteger();
    List<Exception> refused = new CopyOnWriteArrayList<>();
    IdempotentRecordHandler<String, String> handler =
        LoopFixture.handler(overThePool)
            .groupId("billing")
            .handler(record -> handlerRuns.incrementAndGet())
            .build();
    RecordProcessor<String, String> claimsOnly =
        record -> {
          try {
            return handler.process(record);
          } catch (RuntimeException e) {
            refused.add(e);
            throw e;
          }
        };
    List<Exception> givenUp = new CopyOnWriteArrayList<>();
    try (RunningLoop running = RunningLoop.start(attempts(2, claimsOnly, givenUp))) {
      await().atMost(WAIT).until(() -> refused.size() >= 3 || !givenUp.isEmpty());
    }

    assertThat(refused)
        .first()
        .satisfies(e -> assertThat(e).hasMessageContaining("needs an open transaction"));
    assertThat(givenUp)
        .as("a set-up mistake holds the record until the application is fixed")
        .isEmpty();
    assertThat(handlerRuns).hasValue(0);
  }

  private DedupPollLoop<String, String> attempts(
      int maxAttempts, RecordProcessor<String, String> payments, List<Exception> givenUp) {
    return LoopFixture.quick(
            DedupPollLoop.builder(
                    TestKafka.consumerConfig(fixture.group()), List.of(fixture.topic()), payments)
                .deadLetterHandler((record, reason) -> givenUp.add(reason)))
        .maxAttempts(maxAttempts)
        .build();
  }

  /**
   * Runs {@code loop} on a thread of its own until it ends (failing the test if it does not end in
   * {@link LoopFixture#WAIT}).
   *
   * @return what it ended with, or {@code null} if it returned
   */
  private static Throwable runToItsEnd(DedupPollLoop<String, String> loop) throws Exception {
    ExecutorService pollThread = Executors.newSingleThreadExecutor();
    try {
      pollThread.submit(loop).get(WAIT.toSeconds(), TimeUnit.SECONDS);
      return null;
    } catch (ExecutionException e) {
      return e.getCause();
    } finally {
      pollThread.shutdownNow();
    }
  }

  /**
   * A handler step that throws an {@code Error} for {@code brokenOrder}, counting in {@code
   * errors}.
   */
  private static ChargeStep brokenFor(String brokenOrder, AtomicInteger errors) {
    return order -> {
      if (order.equals(brokenOrder)) {
        errors.incrementAndGet();
        throw new AssertionError("ledger invariant broken");
      }
    };
  }

  @Test
  void aRecordWhoseHandlerAlwaysThrowsAnErrorIsDeadLetteredOnceItsAttemptsAreSpent()
      throws Exception {
    send("A-0-BROKEN");
    send("A-1");
    AtomicInteger errors = new AtomicInteger();
    RecordProcessor<String, String> payments =
        payments(transactions, "billing", brokenFor("A-0-BROKEN", errors));
    List<Exception> givenUp = new CopyOnWriteArrayList<>();
    int loopsEnded = 0;
    // As the application does: a loop that ends with an Error is followed by a new one, over the
    // same processor. maxAttempts 2: the second loop's attempt is the last.
    while (givenUp.isEmpty() && loopsEnded < 3) {
      assertThat(runToItsEnd(attempts(2, payments, givenUp)))
          .as("what the loop ended with")
          .isInstanceOf(AssertionError.class);
      loopsEnded++;
    }

    assertThat(errors).as("the handler threw its Error").hasPositiveValue();
    assertThat(givenUp)
        .as("dead-lettered by the loop of its second attempt (loops ended: %s)", loopsEnded)
        .singleElement()
        .satisfies(reason -> assertThat(reason).hasRootCauseInstanceOf(AssertionError.class));
    assertThat(loopsEnded).isEqualTo(2);
    try (RunningLoop next = RunningLoop.start(loop(fixture.group(), payments))) {
      awaitCommitted(fixture.group(), 2);
    }
    assertThat(charges("A-0-BROKEN")).isEmpty();
    assertThat(charges("A-1")).containsExactly("billing");
    givenUp.clear();
  }

  @Test
  void aHandlerThatCatchesItsFailedStatementIsNotPassedAsAppliedWhileTheDatabaseRolledItBack()
      throws Exception {
    send("S-0-SWALLOWS");
    send("S-1");
    // A handler that books the charge, then an audit row it takes as optional: it catches the
    // statement's failure and returns. PostgreSQL has aborted the transaction by then, and
    // pgjdbc's commit of it returns normally having committed nothing.
    RecordProcessor<String, String> payments =
        payments(
            transactions,
            "billing",
            order -> {
              if (order.equals("S-0-SWALLOWS")) {
                try (Connection connection = transactions.getConnection();
                    Statement audit = connection.createStatement()) {
                  audit.execute("INSERT INTO no_such_audit_table VALUES (1)");
                } catch (SQLException optional) {
                  // the audit row is optional
                }
              }
            });
    List<Exception> givenUp = new CopyOnWriteArrayList<>();
    try (RunningLoop running = RunningLoop.start(attempts(2, payments, givenUp))) {
      awaitCommitted(fixture.group(), 2);
    }

    assertThat(charges("S-1")).containsExactly("billing");
    assertThat(givenUp)
        .as("the record whose transaction the database had rolled back, dead-lettered, not passed")
        .singleElement()
        .satisfies(reason -> assertThat(reason).hasMessageContaining("aborted"));
    assertThat(charges("S-0-SWALLOWS")).isEmpty();
    assertThat(fixture.store().find(DedupKey.of(BIZ_TYPE, "S-0-SWALLOWS"))).isEmpty();
  }

  /**
   * An {@code Error} as the record's transaction was opened (an {@code OutOfMemoryError} from the
   * pool's {@code getConnection}), before anything of the record ran, ends the loop as an Error
   * does. It was counted as a failed attempt of the record, in the count that outlives the loop:
   * once the application's restarted loops had met it as often as {@code maxAttempts}, the record
   * was dead-lettered as if its handler had thrown, and never applied.
   */
  @Test
  void anErrorFromThePoolAsTheTransactionOpensCountsNoAttemptAndTheRecordIsAppliedAfterwards()
      throws Exception {
    send("OOM-1");
    AtomicBoolean outOfMemory = new AtomicBoolean();
    AtomicInteger refused = new AtomicInteger();
    AtomicInteger handlerRuns = new AtomicInteger();
    DataSource pool = fixture.dataSource();
    DataSource failing =
        (DataSource)
            Proxy.newProxyInstance(
                DataSource.class.getClassLoader(),
                new Class<?>[] {DataSource.class},
                (proxy, method, args) -> {
                  if (method.getName().equals("getConnection") && outOfMemory.get()) {
                    refused.incrementAndGet();
                    throw new OutOfMemoryError("Java heap space, from the pool");
                  }
                  try {
                    return method.invoke(pool, args);
                  } catch (InvocationTargetException e) {
                    throw e.getCause();
                  }
                });
    RecordProcessor<String, String> payments =
        payments(
            TransactionBoundDataSource.of(failing),
            "billing",
            order -> handlerRuns.incrementAndGet());
    outOfMemory.set(true); // once the executor is built: it checks the table at build()
    List<Exception> givenUp = new CopyOnWriteArrayList<>();
    // As the application does: a loop that ends with an Error is followed by a new one, over the
    // same processor. maxAttempts 2: two loops would spend the record's attempts.
    for (int loopsEnded = 0; loopsEnded < 2; loopsEnded++) {
      assertThat(runToItsEnd(attempts(2, payments, givenUp)))
          .as("what the loop ended with")
          .isInstanceOf(OutOfMemoryError.class);
    }
    assertThat(refused).as("connections refused with the Error").hasValueGreaterThanOrEqualTo(2);
    assertThat(handlerRuns).as("handler runs while the pool threw").hasValue(0);

    outOfMemory.set(false);
    try (RunningLoop running = RunningLoop.start(attempts(2, payments, givenUp))) {
      awaitCommitted(fixture.group(), 1);
    }

    assertThat(givenUp)
        .as("records dead-lettered though their handler never ran (it ran %s times)", handlerRuns)
        .isEmpty();
    assertThat(charges("OOM-1")).containsExactly("billing");
  }

  @Test
  void anInterruptedPollThreadRollsBackItsRecordAndStops() throws Exception {
    send("T-6");
    CountDownLatch booked = new CountDownLatch(1);
    RecordProcessor<String, String> blocking =
        payments(
            transactions,
            "billing",
            order -> {
              booked.countDown();
              new CountDownLatch(1).await(); // a bank call that hangs until interrupted
            });
    ExecutorService pollThread = Executors.newSingleThreadExecutor();
    try {
      Future<?> run = pollThread.submit(loop(fixture.group(), blocking));
      assertThat(booked.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();

      pollThread.shutdownNow();

      run.get(WAIT.toSeconds(), TimeUnit.SECONDS); // the loop stopped by itself
    } finally {
      pollThread.shutdownNow();
    }
    assertThat(charges("T-6")).isEmpty();
    assertThat(fixture.store().find(DedupKey.of(BIZ_TYPE, "T-6"))).isEmpty();
    assertThat(TestKafka.committedOffsets(fixture.group())).isEmpty();

    // The restarted consumer books the order once.
    try (RunningLoop restarted =
        RunningLoop.start(loop(fixture.group(), payments(transactions, "billing", order -> {})))) {
      awaitCommitted(fixture.group(), 1);
    }
    assertThat(charges("T-6")).containsExactly("billing");
  }
}
