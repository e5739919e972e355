package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The application interrupts the share loop's thread (an executor's {@code shutdownNow}) while a
 * statement or a stop is under way: against the real broker and PostgreSQL, what a user of a Kafka
 * queue would notice. DedupShareLoopTest covers the interrupt during a SUCCESS mark.
 */
class DedupShareLoopInterruptTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("share_interrupt");

  private static final Duration WAIT = Duration.ofSeconds(60);

  /** Longer than the test may take: a claim stranded under it is never taken over in time. */
  private static final Duration LEASE = Duration.ofMinutes(5);

  /** A loop whose handler does not return soon stops without it, after this. */
  private static final Duration QUICK_STOP = Duration.ofSeconds(3);

  private final List<IdempotentExecutor> executors = new CopyOnWriteArrayList<>();
  private final List<DedupShareLoop<String, String>> loops = new CopyOnWriteArrayList<>();
  private final KafkaProducer<String, String> dltProducer = TestKafka.producer();

  /** The loops' own pool: the statements waiting for the lock take none of the fixture's. */
  private HikariDataSource loopConnections;

  private Connection tableLock;

  @BeforeEach
  void connect() {
    loopConnections = TestDatabase.dataSource(fixture.schema(), 4);
  }

  @AfterEach
  void stop() throws SQLException {
    if (tableLock != null && !tableLock.isClosed()) {
      tableLock.rollback();
      tableLock.close();
    }
    loops.forEach(DedupShareLoop::close);
    executors.forEach(IdempotentExecutor::close);
    dltProducer.close();
    loopConnections.close();
  }

  /**
   * The claim of the poll's keys in flight, the database holding the statement back behind a table
   * lock: the claim commits after the loop has ended and its consumer has given the record back.
   * The loop must not have accepted the record its handler never ran for, and the claim committed
   * for a loop that is gone must not hold the key for its lease, or the copy the broker delivers to
   * a new loop would wait that long.
   */
  @Test
  void aLoopInterruptedWhileItsPollsClaimIsInFlightAcceptsNothingAndStrandsNoClaim()
      throws Exception {
    String topic = fixture.topic();
    String group = fixture.group();
    TestKafka.createTopics(1, topic);
    TestShareGroups.configure(group, Duration.ofSeconds(5), Duration.ofSeconds(1));
    AtomicInteger runs = new AtomicInteger();

    Thread first = new Thread(loop(topic, group, QUICK_STOP, record -> runs.incrementAndGet()));
    first.start();
    await().atMost(WAIT).until(() -> TestShareGroups.members(group) == 1);
    lockTheTable();
    send(topic, "claim-1", "charge 3.00");
    await()
        .atMost(WAIT)
        .alias("the poll's claim waits for the table lock")
        .until(() -> claimsWaitingForTheLock() == 1);

    first.interrupt();
    first.join(WAIT.toMillis());
    assertThat(first.isAlive()).as("the interrupted loop ended").isFalse();
    assertThat(claimsWaitingForTheLock()).as("its claim still in flight").isEqualTo(1);
    assertThat(runs).as("handler runs before the claim answered").hasValue(0);
    assertThat(TestShareGroups.lag(group, topic))
        .as("the record not accepted (-1: nothing acknowledged yet in the group)")
        .isNotZero();

    // The copy the closed consumer gave back goes to a new loop, whose claim queues behind the
    // interrupted loop's: the interrupted loop's claim commits first, after that loop is gone.
    Thread second = new Thread(loop(topic, group, QUICK_STOP, record -> runs.incrementAndGet()));
    second.start();
    await()
        .atMost(WAIT)
        .alias("the new loop's claim of the copy waits behind the interrupted loop's")
        .until(() -> claimsWaitingForTheLock() == 2);
    tableLock.rollback();
    tableLock.close();

    await()
        .atMost(WAIT)
        .alias("the copy applied by the new loop, well within the interrupted loop's lease")
        .until(() -> status("claim-1").filter(s -> s == DedupStatus.SUCCESS).isPresent());
    await()
        .atMost(WAIT)
        .alias("the record accepted")
        .until(() -> TestShareGroups.lag(group, topic) == 0);
    assertThat(runs).as("handler runs").hasValue(1);
    await()
        .atMost(WAIT)
        .alias("the interrupted loop's worker thread ended once its claim answered")
        .until(() -> workerThreads(group) == 1);
    loops.forEach(DedupShareLoop::close);
    second.join(WAIT.toMillis());
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3))).isEmpty();
  }

  /**
   * Interrupted again while it stops: {@link DedupShareLoop#close()} asked the loop to stop, and
   * the loop waits for the handler in hand to finish its record. The interrupt must not cut that
   * short: the handler's record is accepted once its SUCCESS is written, not given back to be
   * delivered again, and the loop ends and counts itself finished, so the close returns.
   */
  @Test
  void aLoopInterruptedWhileItStopsStillAcceptsTheRecordItsHandlerFinished() throws Exception {
    String topic = fixture.topic();
    String group = fixture.group();
    TestKafka.createTopics(1, topic);
    TestShareGroups.configure(group, Duration.ofSeconds(5), Duration.ofSeconds(1));
    AtomicInteger runs = new AtomicInteger();
    CountDownLatch handlerStarted = new CountDownLatch(1);
    CountDownLatch handlerMayFinish = new CountDownLatch(1);
    DedupShareLoop<String, String> loop =
        loop(
            topic,
            group,
            WAIT,
            record -> {
              runs.incrementAndGet();
              handlerStarted.countDown();
              handlerMayFinish.await();
            });
    Thread loopThread = new Thread(loop);
    loopThread.start();
    await().atMost(WAIT).until(() -> TestShareGroups.members(group) == 1);
    send(topic, "stop-1", "charge 4.00");
    assertThat(handlerStarted.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();

    ExecutorService closer = Executors.newSingleThreadExecutor();
    try {
      Future<?> closed = closer.submit(loop::close);
      await()
          .atMost(WAIT)
          .alias("the loop waits for the handler in hand to stop")
          .until(() -> inStopSequence(loopThread));
      loopThread.interrupt();
      handlerMayFinish.countDown();
      loopThread.join(WAIT.toMillis());
      assertThat(loopThread.isAlive()).as("the loop ended").isFalse();
      closed.get(WAIT.toSeconds(), TimeUnit.SECONDS);
    } finally {
      closer.shutdownNow();
    }
    assertThat(status("stop-1")).contains(DedupStatus.SUCCESS);
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3)))
        .as("the record whose handler ran was accepted, not given back by the interrupted stop")
        .isEmpty();
    assertThat(runs).as("handler runs").hasValue(1);
  }

  /**
   * The application calls {@link DedupShareLoop#close()} on a thread already interrupted (a
   * shutdown hook of an executor stopped with {@code shutdownNow}) while a handler runs. close()
   * promises that once it returns the consumer is closed and the record in hand finished, so that
   * the application may close its executor and DataSource: it must still wait, and leave the
   * interrupt set.
   */
  @Test
  void aCloseOnAnInterruptedThreadStillWaitsForTheHandlerInHand() throws Exception {
    String topic = fixture.topic();
    String group = fixture.group();
    TestKafka.createTopics(1, topic);
    TestShareGroups.configure(group, Duration.ofSeconds(5), Duration.ofSeconds(1));
    CountDownLatch handlerStarted = new CountDownLatch(1);
    DedupShareLoop<String, String> loop =
        loop(
            topic,
            group,
            WAIT,
            record -> {
              handlerStarted.countDown();
              Thread.sleep(1500);
            });
    Thread loopThread = new Thread(loop);
    loopThread.start();
    await().atMost(WAIT).until(() -> TestShareGroups.members(group) == 1);
    send(topic, "interrupted-close-1", "charge 6.00");
    assertThat(handlerStarted.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();

    AtomicBoolean stillInterrupted = new AtomicBoolean();
    AtomicReference<Optional<DedupStatus>> statusOnReturn = new AtomicReference<>();
    AtomicBoolean loopAliveOnReturn = new AtomicBoolean(true);
    Thread closer =
        new Thread(
            () -> {
              Thread.currentThread().interrupt();
              loop.close();
              statusOnReturn.set(status("interrupted-close-1"));
              stillInterrupted.set(Thread.interrupted());
              // The loop's thread still logs and returns after it counts its stop done.
              try {
                loopThread.join(500);
              } catch (InterruptedException e) {
                throw new AssertionError(e);
              }
              loopAliveOnReturn.set(loopThread.isAlive());
            });
    closer.start();
    closer.join(WAIT.toMillis());
    assertThat(statusOnReturn.get())
        .as("the handler's outcome when close() returned")
        .contains(DedupStatus.SUCCESS);
    assertThat(loopAliveOnReturn).as("the loop still running when close() returned").isFalse();
    assertThat(stillInterrupted).as("the caller's interrupt kept").isTrue();
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3))).isEmpty();
  }

  /** Whether the loop's thread is waiting for the handler in hand as the loop stops. */
  private static boolean inStopSequence(Thread loopThread) {
    for (StackTraceElement frame : loopThread.getStackTrace()) {
      if (frame.getMethodName().equals("finishInHand")) {
        return true;
      }
    }
    return false;
  }

  /** Holds back every write to the dedup table until rolled back. */
  private void lockTheTable() throws SQLException {
    tableLock = fixture.dataSource().getConnection();
    tableLock.setAutoCommit(false);
    try (Statement lock = tableLock.createStatement()) {
      lock.execute("LOCK TABLE consumer_dedup IN SHARE MODE");
    }
  }

  /** Statements of this test's schema's table that wait for a lock: the loops' claims. */
  private static long claimsWaitingForTheLock() throws SQLException {
    try (Connection connection = fixture.dataSource().getConnection();
        Statement query = connection.createStatement();
        ResultSet waiting =
            query.executeQuery(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                    + " WHERE NOT l.granted AND l.relation = 'consumer_dedup'::regclass"
                    + " AND a.query ILIKE '%insert%'")) {
      waiting.next();
      return waiting.getLong(1);
    }
  }

  private static Optional<DedupStatus> status(String orderNo) {
    return fixture
        .store()
        .find(DedupKey.of(LoopFixture.BIZ_TYPE, orderNo))
        .map(DedupRecord::status);
  }

  /** The share loops' worker threads of {@code group} alive in this JVM. */
  private static long workerThreads(String group) {
    return Thread.getAllStackTraces().keySet().stream()
        .filter(Thread::isAlive)
        .filter(thread -> thread.getName().equals("dedup-share-worker-" + group))
        .count();
  }

  private static void send(String topic, String orderNo, String value) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, value);
    record.headers().add(LoopFixture.KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(record).get();
  }

  /**
   * A share loop whose store waits for the table lock as long as the test lasts: its claim stays
   * one statement in flight, not cancelled and retried by the statement timeout.
   */
  private DedupShareLoop<String, String> loop(
      String topic,
      String group,
      Duration closeTimeout,
      RecordHandler<String, String> handlerBody) {
    JdbcDedupStore store =
        JdbcDedupStore.builder(loopConnections).statementTimeout(Duration.ofMinutes(3)).build();
    IdempotentExecutor executor = IdempotentExecutor.builder(store).lease(LEASE).build();
    executors.add(executor);
    IdempotentRecordHandler<String, String> handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(LoopFixture.BIZ_TYPE)
            .key(KeyExtractors.header(LoopFixture.KEY_HEADER))
            .groupId(group)
            .handler(handlerBody)
            .build();
    DedupShareLoop<String, String> loop =
        DedupShareLoop.builder(TestShareGroups.consumerConfig(group), List.of(topic), handler)
            .deadLetterHandler(KafkaDeadLetterPublisher.builder(dltProducer).groupId(group).build())
            .holdBackOff(Duration.ofMillis(200), Duration.ofSeconds(1))
            .closeTimeout(closeTimeout)
            .build();
    loops.add(loop);
    return loop;
  }
}
