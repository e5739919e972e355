package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.WAIT;
import static io.consumerdedup.kafka.LoopFixture.orderNo;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.TransactionBoundDataSource;
import io.consumerdedup.testing.TestKafka;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BiFunction;
import javax.sql.DataSource;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.LoggerFactory;

/**
 * How {@link JdbcTransactionalProcessor} counts a record's attempts with {@link DedupPollLoop}: a
 * record whose attempts are spent is not run again, an {@code Error} of the transaction itself is
 * no attempt, and a record given up leaves no count behind for its replay. What a user sees: the
 * charge rows the handler books, the dead letters, and the loop's log.
 */
class JdbcTransactionalAttemptsTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_tx_attempts");

  private final List<AutoCloseable> resources = new ArrayList<>();
  private final AtomicInteger handlerRuns = new AtomicInteger();
  private ListAppender<ILoggingEvent> loopLog;

  @BeforeAll
  static void createChargesTable() throws SQLException {
    try (Connection connection = fixture.dataSource().getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE TABLE charges (order_no text NOT NULL)");
    }
  }

  @BeforeEach
  void setUp() {
    TestKafka.createTopics(1, fixture.topic(), fixture.topic() + "-dlt");
    loopLog = new ListAppender<>();
    loopLog.start();
    ((Logger) LoggerFactory.getLogger(DedupPollLoop.class)).addAppender(loopLog);
  }

  @AfterEach
  void tearDown() throws Exception {
    ((Logger) LoggerFactory.getLogger(DedupPollLoop.class)).detachAppender(loopLog);
    for (int i = resources.size() - 1; i >= 0; i--) {
      resources.get(i).close();
    }
  }

  /** What the handler does once it has booked the charge, inside the record's transaction. */
  @FunctionalInterface
  private interface ChargeStep {
    void run(String orderNo);
  }

  /**
   * The payment consumer in mode TRANSACTIONAL over {@code pool}, per poll ({@link
   * JdbcTransactionalProcessor#of}): books the charge row, then {@code afterCharge}, counting its
   * runs in {@link #handlerRuns}.
   */
  private JdbcTransactionalProcessor<String, String> payments(
      DataSource pool, ChargeStep afterCharge) {
    return payments(pool, afterCharge, JdbcTransactionalProcessor::of);
  }

  /** As above, in the transactions {@code processor} runs them in. */
  private JdbcTransactionalProcessor<String, String> payments(
      DataSource pool,
      ChargeStep afterCharge,
      BiFunction<
              TransactionBoundDataSource,
              RecordProcessor<String, String>,
              JdbcTransactionalProcessor<String, String>>
          processor) {
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(pool);
    IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(transactions).build())
            .mode(DedupMode.TRANSACTIONAL)
            .build();
    resources.add(executor);
    IdempotentRecordHandler<String, String> handler =
        LoopFixture.handler(executor)
            .groupId("billing")
            .handler(
                record -> {
                  handlerRuns.incrementAndGet();
                  try (Connection connection = transactions.getConnection();
                      PreparedStatement charge =
                          connection.prepareStatement(
                              "INSERT INTO charges (order_no) VALUES (?)")) {
                    charge.setString(1, orderNo(record));
                    charge.executeUpdate();
                  }
                  afterCharge.run(orderNo(record));
                })
            .build();
    return processor.apply(transactions, handler);
  }

  private static DedupPollLoop<String, String> loop(
      int maxAttempts,
      RecordProcessor<String, String> payments,
      DeadLetterHandler<String, String> deadLetters) {
    return LoopFixture.quick(
            DedupPollLoop.builder(
                    TestKafka.consumerConfig(fixture.group()), List.of(fixture.topic()), payments)
                .deadLetterHandler(deadLetters))
        .maxAttempts(maxAttempts)
        .build();
  }

  /**
   * The fault the test sketches: the record's last attempt fails, and its dead letter cannot be
   * written the first time (the dead-letter topic briefly unavailable), so the partition is held at
   * the record. The next poll's transaction ran every record of the poll, this one included, before
   * the loop saw that its attempts were spent: the handler ran a third time with {@code
   * maxAttempts} 2, its charge committed, and the record was then dead-lettered as well.
   */
  @Test
  void aRecordWhoseAttemptsAreSpentIsNotRunAgainByThePollsTransactionWhileItsDeadLetterWaits()
      throws Exception {
    send("SPENT-1");
    AtomicInteger deadLetterTries = new AtomicInteger();
    AtomicInteger runsAfterAttemptsSpent = new AtomicInteger();
    // The ledger rejects the charge until the record is given up, then would take it.
    JdbcTransactionalProcessor<String, String> payments =
        payments(
            fixture.dataSource(),
            order -> {
              if (deadLetterTries.get() == 0) {
                throw new IllegalStateException("ledger rejected the charge");
              }
              runsAfterAttemptsSpent.incrementAndGet();
            });
    try (KafkaProducer<String, String> dltProducer = TestKafka.producer()) {
      DeadLetterHandler<String, String> publisher =
          KafkaDeadLetterPublisher.builder(dltProducer).groupId(fixture.group()).build();
      DeadLetterHandler<String, String> flaky =
          (record, reason) -> {
            if (deadLetterTries.incrementAndGet() == 1) {
              throw new IllegalStateException("dead-letter topic unavailable");
            }
            publisher.deadLetter(record, reason);
          };
      try (RunningLoop running = RunningLoop.start(loop(2, payments, flaky))) {
        awaitCommitted(1);
      }
    }

    assertThat(deadLetterTries)
        .as("the first dead letter failed, the second was written")
        .hasValue(2);
    assertThat(runsAfterAttemptsSpent)
        .as("handler runs after the record's attempts were spent (runs in all: %s)", handlerRuns)
        .hasValue(0);
    assertThat(charges("SPENT-1")).as("charges of a dead-lettered record").isEmpty();
    assertThat(fixture.store().find(DedupKey.of(BIZ_TYPE, "SPENT-1"))).isEmpty();
    assertThat(TestKafka.endOffset(new TopicPartition(fixture.topic() + "-dlt", 0)))
        .as("dead letters written")
        .isEqualTo(1);
  }

  /**
   * A record dead-lettered once its attempts were spent, then replayed by an operator who rewinds
   * the group, with the same processor running it. Its failures stayed counted in the processor's
   * memory (dropped only when the record committed), so the replay's first failure was taken for
   * "attempt 3 of 2" and the record went straight back to the dead letters.
   */
  @Test
  void aDeadLetteredRecordThatIsReplayedGetsItsFullAttemptsAgain() throws Exception {
    send("REPLAY-1");
    AtomicInteger failuresLeft = new AtomicInteger(Integer.MAX_VALUE);
    JdbcTransactionalProcessor<String, String> payments =
        payments(
            fixture.dataSource(),
            order -> {
              if (failuresLeft.getAndDecrement() > 0) {
                throw new IllegalStateException("ledger rejected the charge");
              }
            });
    List<Exception> givenUp = new CopyOnWriteArrayList<>();
    try (RunningLoop running =
        RunningLoop.start(loop(2, payments, (record, reason) -> givenUp.add(reason)))) {
      awaitCommitted(1);
    }
    assertThat(givenUp).as("dead-lettered once its two attempts failed").hasSize(1);

    // The ledger is fixed but for one more rejection; the operator replays the topic.
    givenUp.clear();
    failuresLeft.set(2); // one attempt: in the poll's transaction, then alone
    rewind();
    try (RunningLoop running =
        RunningLoop.start(loop(2, payments, (record, reason) -> givenUp.add(reason)))) {
      await().atMost(WAIT).until(() -> !charges("REPLAY-1").isEmpty() || !givenUp.isEmpty());
    }

    assertThat(givenUp)
        .as("the replay's first failure is its first attempt of two, not its last")
        .isEmpty();
    assertThat(failuresLeft.get()).as("the replay failed its first attempt").isNegative();
    assertThat(charges("REPLAY-1")).hasSize(1);
  }

  /**
   * An {@code Error} as the record's transaction opens (an {@code OutOfMemoryError} from the pool),
   * at the record's last attempt ({@code maxAttempts} 1): no attempt of the handler, which never
   * ran. The loop took it for a handler's Error and dead-lettered the record, committing past it
   * with no charge.
   */
  @Test
  void anErrorAsTheTransactionOpensAtTheLastAttemptDeadLettersNothing() throws Exception {
    send("OOM-1");
    AtomicBoolean outOfMemory = new AtomicBoolean();
    AtomicInteger refused = new AtomicInteger();
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
    JdbcTransactionalProcessor<String, String> payments = payments(failing, order -> {});
    outOfMemory.set(true); // once the executor is built: it checks the table at build()
    List<Exception> givenUp = new CopyOnWriteArrayList<>();

    assertThat(runToItsEnd(loop(1, payments, (record, reason) -> givenUp.add(reason))))
        .as("what the loop ended with")
        .isInstanceOf(OutOfMemoryError.class);
    assertThat(refused).as("connections refused with the Error").hasPositiveValue();
    assertThat(givenUp)
        .as("records dead-lettered though their handler never ran (it ran %s times)", handlerRuns)
        .isEmpty();
    assertThat(TestKafka.committedOffsets(fixture.group())).isEmpty();

    outOfMemory.set(false);
    try (RunningLoop running =
        RunningLoop.start(loop(1, payments, (record, reason) -> givenUp.add(reason)))) {
      awaitCommitted(1);
    }
    assertThat(givenUp).isEmpty();
    assertThat(charges("OOM-1")).hasSize(1);
  }

  /**
   * An {@code Error} as the record's transaction commits, after the server committed it (an {@code
   * OutOfMemoryError} as the commit's reply is read), at the record's last attempt: the loop took
   * it for a handler's Error and dead-lettered the record whose charge had committed, so it was
   * both applied and dead-lettered.
   */
  @Test
  void anErrorAsTheTransactionCommitsAtTheLastAttemptDeadLettersNothing() throws Exception {
    send("COMMIT-OOM-1");
    AtomicBoolean commitError = new AtomicBoolean();
    AtomicInteger thrown = new AtomicInteger();
    DataSource pool = fixture.dataSource();
    DataSource replyLost =
        (DataSource)
            Proxy.newProxyInstance(
                DataSource.class.getClassLoader(),
                new Class<?>[] {DataSource.class},
                (proxy, method, args) -> {
                  Object result = invoke(pool, method, args);
                  return method.getName().equals("getConnection")
                      ? errorAfterCommit((Connection) result, commitError, thrown)
                      : result;
                });
    JdbcTransactionalProcessor<String, String> payments =
        payments(replyLost, order -> {}, JdbcTransactionalProcessor::perRecord);
    commitError.set(true); // once the executor is built: it checks the table at build()
    List<Exception> givenUp = new CopyOnWriteArrayList<>();

    assertThat(runToItsEnd(loop(1, payments, (record, reason) -> givenUp.add(reason))))
        .as("what the loop ended with")
        .isInstanceOf(OutOfMemoryError.class);
    assertThat(thrown).as("the commit's Error, once the server had committed").hasValue(1);
    try (RunningLoop running =
        RunningLoop.start(loop(1, payments, (record, reason) -> givenUp.add(reason)))) {
      awaitCommitted(1);
    }

    assertThat(givenUp)
        .as("records dead-lettered though they were applied (charges: %s)", charges("COMMIT-OOM-1"))
        .isEmpty();
    assertThat(charges("COMMIT-OOM-1")).hasSize(1);
    assertThat(handlerRuns).as("the redelivery was a duplicate").hasValue(1);
  }

  /** A connection whose first {@code commit()} commits, then throws an {@code Error}. */
  private static Connection errorAfterCommit(
      Connection connection, AtomicBoolean commitError, AtomicInteger thrown) {
    return (Connection)
        Proxy.newProxyInstance(
            Connection.class.getClassLoader(),
            new Class<?>[] {Connection.class},
            (proxy, method, args) -> {
              Object result = invoke(connection, method, args);
              if (method.getName().equals("commit") && commitError.getAndSet(false)) {
                thrown.incrementAndGet();
                throw new OutOfMemoryError("Java heap space, as the commit's reply was read");
              }
              return result;
            });
  }

  private static Object invoke(Object target, Method method, Object[] args) throws Throwable {
    try {
      return method.invoke(target, args);
    } catch (InvocationTargetException e) {
      throw e.getCause();
    }
  }

  /**
   * The processor's count of a record's failures lives in its memory: the log of a record given up
   * on a count larger than the loop's said it was the dedup table's, "across restarts", which a
   * restart of the process forgets.
   */
  @Test
  void aRecordGivenUpOnTheProcessorsCountSaysTheCountIsInMemory() throws Exception {
    send("BROKEN-1");
    JdbcTransactionalProcessor<String, String> payments =
        payments(
            fixture.dataSource(),
            order -> {
              throw new AssertionError("ledger invariant broken");
            });
    List<Exception> givenUp = new CopyOnWriteArrayList<>();
    // As the application does: a loop that ends with an Error is followed by a new one, over the
    // same processor; the second loop's count is 1, the processor's 2.
    for (int loopsEnded = 0; loopsEnded < 2; loopsEnded++) {
      assertThat(runToItsEnd(loop(2, payments, (record, reason) -> givenUp.add(reason))))
          .as("what the loop ended with")
          .isInstanceOf(AssertionError.class);
    }

    assertThat(givenUp).as("dead-lettered by the second loop").hasSize(1);
    assertThat(loopLog.list)
        .filteredOn(event -> event.getLevel() == Level.ERROR)
        .extracting(ILoggingEvent::getFormattedMessage)
        .filteredOn(message -> message.contains("dead-lettering it"))
        .singleElement()
        .satisfies(
            message ->
                assertThat(message)
                    .contains("attempt 2 of 2")
                    .contains("in memory")
                    .contains("this loop's count is 1")
                    .doesNotContain("dedup table"));
  }

  private static void send(String orderNo) throws Exception {
    JdbcTransactionalLoops.send(fixture, orderNo);
  }

  private static void awaitCommitted(long offset) {
    LoopFixture.awaitCommitted(
        fixture.group(), Map.of(new TopicPartition(fixture.topic(), 0), offset));
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

  /** Moves the (idle) group's committed offset back to the start of the topic. */
  private static void rewind() throws Exception {
    try (Admin admin =
        Admin.create(
            Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, TestKafka.bootstrapServers()))) {
      admin
          .alterConsumerGroupOffsets(
              fixture.group(),
              Map.of(new TopicPartition(fixture.topic(), 0), new OffsetAndMetadata(0)))
          .all()
          .get();
    }
  }

  /** The committed charge rows of the order. */
  private static List<String> charges(String orderNo) throws SQLException {
    try (Connection connection = fixture.dataSource().getConnection();
        PreparedStatement query =
            connection.prepareStatement("SELECT order_no FROM charges WHERE order_no = ?")) {
      query.setString(1, orderNo);
      try (ResultSet rows = query.executeQuery()) {
        List<String> found = new ArrayList<>();
        while (rows.next()) {
          found.add(rows.getString(1));
        }
        return found;
      }
    }
  }
}
