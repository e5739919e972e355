package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowable;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.micrometer.MicrometerDedupListener;
import io.consumerdedup.testing.FaultyDataSource;
import io.consumerdedup.testing.TestDatabase;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.temporal.ChronoUnit;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;
import java.util.function.Supplier;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;

/** Retention: expired records go, in bounded batches, however many janitors run. */
class DedupJanitorTest {
  private String schema;
  private HikariDataSource dataSource;
  private JdbcDedupStore store;

  @BeforeEach
  void setUp() throws SQLException {
    schema = TestDatabase.newSchema("janitor");
    dataSource = TestDatabase.dataSource(schema, 4);
    store = JdbcDedupStore.builder(dataSource).build();
    execute(
        "INSERT INTO consumer_dedup (biz_type, biz_key, status, attempts, owner, expires_at)"
            + " SELECT 'payment', 'expired-' || i, 'SUCCESS', 1, 'old', now() - interval '1 hour'"
            + " FROM generate_series(1, 2500) AS i");
    execute(
        "INSERT INTO consumer_dedup (biz_type, biz_key, status, attempts, owner, expires_at)"
            + " SELECT 'payment', 'kept-' || i, 'SUCCESS', 1, 'new', now() + interval '7 days'"
            + " FROM generate_series(1, 100) AS i");
  }

  @AfterEach
  void tearDown() {
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void twoJanitorsAtOnceDeleteEveryExpiredRecordOnceAndKeepTheRest() throws Exception {
    AtomicInteger reported = new AtomicInteger();
    DedupListener counting =
        new DedupListener() {
          @Override
          public void purged(int count) {
            reported.addAndGet(count);
          }
        };
    DedupJanitor first = DedupJanitor.builder(store).batchSize(300).listener(counting).build();
    DedupJanitor second = DedupJanitor.builder(store).batchSize(300).listener(counting).build();

    CompletableFuture<Integer> a = CompletableFuture.supplyAsync(first::purgeExpired);
    CompletableFuture<Integer> b = CompletableFuture.supplyAsync(second::purgeExpired);

    assertThat(a.get() + b.get()).isEqualTo(2500);
    assertThat(reported).hasValue(2500);
    assertThat(count("expired-%")).isZero();
    assertThat(count("kept-%")).isEqualTo(100);
  }

  @Test
  void oneRunStopsAfterItsBatchLimitAndTheNextRunContinues() throws SQLException {
    DedupJanitor janitor = DedupJanitor.builder(store).batchSize(1000).maxBatchesPerRun(2).build();

    assertThat(janitor.purgeExpired()).isEqualTo(2000);
    assertThat(count("expired-%")).isEqualTo(500);
    assertThat(janitor.purgeExpired()).isEqualTo(500);
  }

  @Test
  void aStartedJanitorPurgesOnItsScheduleUntilClosed() throws SQLException {
    try (DedupJanitor janitor =
        DedupJanitor.builder(store).batchSize(500).interval(Duration.ofMillis(100)).build()) {
      janitor.start();
      await().atMost(Duration.ofSeconds(20)).until(() -> count("expired-%") == 0);
    }
    assertThat(count("kept-%")).isEqualTo(100);
  }

  /**
   * An {@code Error} in a scheduled run (here the application's listener, as the run reports what
   * it purged; an {@code OutOfMemoryError} anywhere in the run alike) ended the schedule: no run
   * came after it, and the table grew from then on without a word until the next restart.
   */
  @Test
  void anErrorInAScheduledRunDoesNotEndTheSchedule() throws SQLException {
    AtomicInteger measures = new AtomicInteger();
    DedupListener failingOnce =
        new DedupListener() {
          @Override
          public void purged(int count) {
            if (measures.incrementAndGet() == 1) {
              throw new StackOverflowError("listener's first purged");
            }
          }
        };
    try (DedupJanitor janitor =
        DedupJanitor.builder(store)
            .batchSize(500)
            .maxBatchesPerRun(1)
            .interval(Duration.ofMillis(100))
            .listener(failingOnce)
            .build()) {
      janitor.start();
      awaitNoExpiredLeft(
          Duration.ofSeconds(20), "expired records left after the run the Error ended");
    }
    assertThat(measures).as("runs that reported what they purged").hasValueGreaterThan(1);
    assertThat(count("kept-%")).isEqualTo(100);
  }

  /**
   * The run's {@code Error} (an {@code OutOfMemoryError} as the pool opens a connection) was caught
   * and logged, but the next run was scheduled only after the log call: when logging it threw too
   * (still out of memory), the schedule ended without a word, as before row 61 was fixed.
   */
  @Test
  void aFailedRunWhoseLoggingThrowsAnErrorStillSchedulesTheNextRun() throws SQLException {
    AtomicInteger connectionErrorsLeft = new AtomicInteger(2);
    DataSource outOfMemoryOnce =
        failingConnections(connectionErrorsLeft, () -> new OutOfMemoryError("Java heap space"));
    AtomicInteger failedRunLogs = new AtomicInteger();
    Logger janitorLog = (Logger) LoggerFactory.getLogger(DedupJanitor.class);
    ListAppender<ILoggingEvent> stillOutOfMemory =
        new ListAppender<>() {
          @Override
          protected void append(ILoggingEvent event) {
            if (event.getLevel() == Level.ERROR
                && event.getMessage().startsWith("Purge of expired dedup records failed")
                && failedRunLogs.incrementAndGet() == 1) {
              throw new OutOfMemoryError("Java heap space, logging the failed run");
            }
          }
        };
    stillOutOfMemory.start();
    janitorLog.addAppender(stillOutOfMemory);
    try (DedupJanitor janitor =
        DedupJanitor.builder(JdbcDedupStore.builder(outOfMemoryOnce).build())
            .batchSize(500)
            .interval(Duration.ofMillis(100))
            .build()) {
      janitor.start();
      awaitNoExpiredLeft(
          Duration.ofSeconds(10), "expired records left after a failed run whose log threw");
    } finally {
      janitorLog.detachAppender(stillOutOfMemory);
    }
    assertThat(connectionErrorsLeft).as("connections refused with the Error").hasValue(0);
    assertThat(failedRunLogs).as("failed runs logged").hasValue(1);
    assertThat(count("kept-%")).isEqualTo(100);
  }

  /**
   * The next run is scheduled at the end of each run. When that scheduling threw (an {@code
   * OutOfMemoryError} as the scheduler allocates the task, likely just when a run failed for want
   * of memory), the {@code Error} went into a future nobody reads: no run came again, nothing was
   * logged, and the table grew from then on until the next restart.
   */
  @Test
  void aNextRunThatCannotBeScheduledIsScheduledAgainAndSaidSo() throws SQLException {
    AtomicInteger refused = new AtomicInteger();
    Logger janitorLog = (Logger) LoggerFactory.getLogger(DedupJanitor.class);
    ListAppender<ILoggingEvent> logged = new ListAppender<>();
    logged.start();
    janitorLog.addAppender(logged);
    try (DedupJanitor janitor =
        DedupJanitor.builder(store)
            .batchSize(500)
            .maxBatchesPerRun(1)
            .interval(Duration.ofMillis(100))
            // The first run is scheduled by start(); the one after it is refused.
            .schedulers(refusingSchedule(2, "scheduling the next run", refused))
            .build()) {
      janitor.start();
      awaitNoExpiredLeft(
          Duration.ofSeconds(10),
          "expired records left after the next run could not be scheduled once");
    } finally {
      janitorLog.detachAppender(logged);
    }
    assertThat(refused).as("schedules refused with the Error").hasValue(1);
    assertThat(logged.list)
        .filteredOn(event -> event.getLevel() == Level.ERROR)
        .extracting(ILoggingEvent::getFormattedMessage)
        .as("the janitor's ERRORs")
        .anyMatch(
            message -> message.startsWith("Could not schedule the next purge of expired dedup"));
    assertThat(count("kept-%")).isEqualTo(100);
  }

  /**
   * The first run could not be scheduled as the janitor started (an {@code OutOfMemoryError} as the
   * scheduler allocated the task): {@code start()} threw, but the janitor kept its scheduler, so
   * the application's {@code start()} again was refused as "DedupJanitor already started" and no
   * run ever came: expired records stayed until the next restart.
   */
  @Test
  void aStartWhoseFirstRunCannotBeScheduledCanBeStartedAgainAndThenPurges() throws SQLException {
    AtomicInteger refused = new AtomicInteger();
    try (DedupJanitor janitor =
        DedupJanitor.builder(store)
            .batchSize(500)
            .interval(Duration.ofMillis(100))
            .schedulers(refusingSchedule(1, "scheduling the first run", refused))
            .build()) {
      assertThat(catchThrowable(janitor::start))
          .as("the first start")
          .isInstanceOf(OutOfMemoryError.class);
      assertThat(refused).as("schedules refused with the Error").hasValue(1);

      janitor.start();
      awaitNoExpiredLeft(
          Duration.ofSeconds(10), "expired records left once the janitor was started again");
    }
    assertThat(count("kept-%")).isEqualTo(100);
  }

  /**
   * A run that failed kept its keyset cursor, which goes back to the oldest row only when a batch
   * comes back short. When the batch after the cursor failed at every run (at volume the last batch
   * of a pass, which walks every unexpired row to the end of the index and is cancelled at the
   * statement timeout; here every batch after a run's first), each later run started there and
   * failed there: nothing before it was purged again, neither the rows a batch had skipped nor
   * those that expired later (FAILED ones under their longer retention), until a restart.
   */
  @Test
  void aBatchThatFailsAtEveryRunDoesNotStopThePurgeOfTheRowsBeforeIt() throws SQLException {
    try (FaultyDataSource faulty = FaultyDataSource.on(schema, 2, Duration.ofSeconds(10))) {
      JdbcDedupStore faultyStore =
          JdbcDedupStore.builder(faulty)
              .statementTimeout(Duration.ofSeconds(1))
              .retryMaxAttempts(1)
              .build();
      faulty.timeOutEvery("created_at >= ?", "consumer_dedup");
      try (DedupJanitor janitor =
          DedupJanitor.builder(faultyStore)
              .batchSize(500)
              .interval(Duration.ofMillis(100))
              .build()) {
        janitor.start();
        awaitNoExpiredLeft(
            Duration.ofSeconds(15),
            () ->
                "expired records left, with "
                    + faulty.statementsTimedOut()
                    + " batches after a cursor cancelled");
      }
      assertThat(faulty.statementsTimedOut()).as("batches after a cursor cancelled").isPositive();
    }
    assertThat(count("kept-%")).isEqualTo(100);
  }

  /**
   * A batch that outlasts the store's statement timeout (too many rows for one statement, a walk
   * over the index entries of purged rows that no vacuum has removed yet) is cancelled by the
   * store's watchdog, and PostgreSQL says the statement was cancelled "due to user request". That
   * was all the failed run said, run after run: nothing named the timeout, nor the batch size, the
   * setting that makes such a purge work again, while the WARN of a janitor behind advised raising
   * it.
   */
  @Test
  void aBatchCancelledAtTheStatementTimeoutSaysSoAndWhatToChange() throws SQLException {
    try (FaultyDataSource faulty = FaultyDataSource.on(schema, 2, Duration.ofSeconds(10))) {
      JdbcDedupStore faultyStore =
          JdbcDedupStore.builder(faulty)
              .statementTimeout(Duration.ofSeconds(1))
              .retryMaxAttempts(1)
              .build();
      DedupJanitor janitor = DedupJanitor.builder(faultyStore).batchSize(500).build();
      faulty.timeOutEvery("WITH batch AS", "consumer_dedup");

      Throwable failure = catchThrowable(janitor::purgeExpired);

      assertThat(faulty.statementsTimedOut()).as("purge batches cancelled").isEqualTo(1);
      assertThat(failure)
          .as("what the failed run says")
          .isInstanceOf(DedupStoreUnavailableException.class)
          .hasMessageContaining("batch of up to 500 rows")
          .hasMessageContaining("statementTimeout (PT1S)")
          .hasMessageContaining("lower batchSize")
          .hasMessageContaining("VACUUM");
      assertThat(failure.getCause())
          .as("the store's failure, with the database's words")
          .isInstanceOf(DedupStoreUnavailableException.class);

      faulty.stopTimingOut();
      assertThat(janitor.purgeExpired()).isEqualTo(2500);
    }
    assertThat(count("kept-%")).isEqualTo(100);
  }

  /**
   * An interval or a longest run "for ever" ({@code ChronoUnit.FOREVER}) was accepted, and then
   * overflowed a long of nanoseconds or milliseconds as the janitor ran: with such a {@code
   * maxRunTime} every run failed with {@code ArithmeticException} before it purged anything, and
   * with such an {@code interval} the schedule ended after the first run.
   */
  @Test
  void anIntervalOrLongestRunTooLongToTimeIsRefusedWhenTheJanitorIsBuilt() {
    Duration forever = ChronoUnit.FOREVER.getDuration();

    assertThatThrownBy(() -> DedupJanitor.builder(store).maxRunTime(forever))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith("maxRunTime must be at most " + DedupJanitor.LONGEST_DURATION);
    assertThatThrownBy(() -> DedupJanitor.builder(store).interval(forever))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith("interval must be at most " + DedupJanitor.LONGEST_DURATION);

    DedupJanitor longest =
        DedupJanitor.builder(store)
            .maxRunTime(DedupJanitor.LONGEST_DURATION)
            .interval(DedupJanitor.LONGEST_DURATION)
            .build();
    assertThat(longest.purgeExpired()).as("records purged at the longest settings").isEqualTo(2500);
    assertThat(longest.lastBacklog()).as("the backlog measured by that run").isPresent();
  }

  /**
   * A listener that throws each time it is told what a run purged (a metrics library of another
   * version: {@code NoSuchMethodError}) turned every run that had purged into a failed one: a
   * caller of {@code purgeExpired} got the Error instead of the count, and the schedule waited a
   * whole interval before the next batch however much work was left.
   */
  @Test
  void aListenerThatThrowsOnEveryPurgedReportHidesNeitherTheCountNorTheWorkLeft()
      throws SQLException {
    DedupListener failing =
        new DedupListener() {
          @Override
          public void purged(int count) {
            throw new NoSuchMethodError("purged, of a metrics library of another version");
          }
        };
    DedupJanitor once =
        DedupJanitor.builder(store).batchSize(1000).maxBatchesPerRun(1).listener(failing).build();
    assertThat(once.purgeExpired()).as("records the run purged").isEqualTo(1000);
    try (DedupJanitor janitor =
        DedupJanitor.builder(store)
            .batchSize(500)
            .maxBatchesPerRun(1)
            .interval(Duration.ofMinutes(10))
            .listener(failing)
            .build()) {
      janitor.start();
      awaitNoExpiredLeft(
          Duration.ofSeconds(20), "expired records left, with work left after each run");
    }
    assertThat(count("kept-%")).isEqualTo(100);
  }

  /**
   * A listener that throws an {@code Error} each time it is told the backlog (a metrics library of
   * another version than the one it was built against: {@code NoSuchMethodError}) stopped every run
   * before it purged anything: retention ended while the runs went on failing.
   */
  @Test
  void aListenerThatThrowsAnErrorOnEveryBacklogReportDoesNotStopThePurge() throws SQLException {
    AtomicInteger reports = new AtomicInteger();
    DedupListener builtAgainstAnotherVersion =
        new DedupListener() {
          @Override
          public void purgeBacklog(long expiredRows, Duration oldestExpiredAge) {
            reports.incrementAndGet();
            throw new NoSuchMethodError("'void io.micrometer.core.instrument.Gauge.set(double)'");
          }
        };
    try (DedupJanitor janitor =
        DedupJanitor.builder(store)
            .batchSize(500)
            .interval(Duration.ofMillis(100))
            .listener(builtAgainstAnotherVersion)
            .build()) {
      janitor.start();
      awaitNoExpiredLeft(
          Duration.ofSeconds(5),
          () -> "expired records left after " + reports.get() + " runs whose report threw");
    }
    assertThat(reports).as("backlog reports that threw").hasPositiveValue();
    assertThat(count("kept-%")).isEqualTo(100);
  }

  /**
   * The backlog count failing (here cancelled by the server at the statement timeout, as a count
   * over many index entries of purged rows can be) failed the whole run before it purged anything,
   * run after run, and the backlog gauge kept its last count.
   */
  @Test
  void aRunWhoseBacklogCountFailsPurgesAllTheSameAndShowsTheBacklogUnknown() throws SQLException {
    SimpleMeterRegistry registry = new SimpleMeterRegistry();
    Logger janitorLog = (Logger) LoggerFactory.getLogger(DedupJanitor.class);
    ListAppender<ILoggingEvent> logged = new ListAppender<>();
    logged.start();
    try (FaultyDataSource faulty = FaultyDataSource.on(schema, 2, Duration.ofSeconds(10))) {
      JdbcDedupStore faultyStore =
          JdbcDedupStore.builder(faulty)
              .statementTimeout(Duration.ofSeconds(1))
              .retryMaxAttempts(1)
              .build();
      DedupJanitor janitor =
          DedupJanitor.builder(faultyStore).listener(new MicrometerDedupListener(registry)).build();
      assertThat(janitor.measureBacklog().orElseThrow().expiredRows()).isEqualTo(2500);
      faulty.timeOutEvery("AS oldest_ms", "consumer_dedup");
      janitorLog.addAppender(logged);

      assertThat(janitor.purgeExpired())
          .as("records purged by a run whose count failed")
          .isEqualTo(2500);
      assertThat(janitor.purgeExpired()).isZero();

      assertThat(faulty.statementsTimedOut()).as("backlog counts cancelled").isEqualTo(2);
      assertThat(count("expired-%")).isZero();
      assertThat(count("kept-%")).isEqualTo(100);
      assertThat(janitor.lastBacklog()).isEmpty();
      assertThat(registry.get(MicrometerDedupListener.PURGE_BACKLOG).gauge().value()).isNaN();
      assertThat(
              registry
                  .get(MicrometerDedupListener.PURGE_OLDEST_EXPIRED)
                  .timeGauge()
                  .value(TimeUnit.MILLISECONDS))
          .isNaN();
      assertThat(logged.list)
          .filteredOn(event -> event.getLevel() == Level.WARN)
          .as("WARNs of two runs whose count failed")
          .singleElement()
          .satisfies(
              warning ->
                  assertThat(warning.getFormattedMessage())
                      .contains("the purge goes on without it", "VACUUM", "statementTimeout"));

      faulty.stopTimingOut();
      assertThat(janitor.measureBacklog().orElseThrow().expiredRows()).isZero();
      assertThat(registry.get(MicrometerDedupListener.PURGE_BACKLOG).gauge().value()).isZero();
    } finally {
      janitorLog.detachAppender(logged);
    }
  }

  /**
   * An {@code Error} from the DataSource during the backlog count (an OutOfMemoryError when the
   * pool opens a connection) left the last count standing, gauge and health alike, and was logged
   * as the application's listener failing.
   */
  @Test
  void anErrorFromTheDataSourceDuringTheCountMakesTheBacklogUnknown() throws SQLException {
    SimpleMeterRegistry registry = new SimpleMeterRegistry();
    Logger janitorLog = (Logger) LoggerFactory.getLogger(DedupJanitor.class);
    ListAppender<ILoggingEvent> logged = new ListAppender<>();
    logged.start();
    AtomicInteger errorsLeft = new AtomicInteger();
    DataSource failingOnDemand =
        failingConnections(
            errorsLeft, () -> new OutOfMemoryError("unable to create native thread"));
    DedupJanitor janitor =
        DedupJanitor.builder(JdbcDedupStore.builder(failingOnDemand).build())
            .listener(new MicrometerDedupListener(registry))
            .build();
    assertThat(janitor.measureBacklog().orElseThrow().expiredRows()).isEqualTo(2500);
    janitorLog.addAppender(logged);
    try {
      errorsLeft.set(1);

      assertThat(janitor.purgeExpired())
          .as("records purged after the count's Error")
          .isEqualTo(2500);

      assertThat(errorsLeft).as("the count's connection failed with the Error").hasValue(0);
      assertThat(janitor.lastBacklog()).as("the backlog after a count that failed").isEmpty();
      assertThat(registry.get(MicrometerDedupListener.PURGE_BACKLOG).gauge().value()).isNaN();
      assertThat(logged.list)
          .extracting(ILoggingEvent::getFormattedMessage)
          .noneMatch(message -> message.contains("a DedupListener threw"))
          .anyMatch(message -> message.contains("Could not count the backlog"));
    } finally {
      janitorLog.detachAppender(logged);
    }
  }

  /**
   * The DataSource throws, for a while, an exception whose {@code getMessage()} throws (a routing
   * DataSource's exception that prints a lookup key it cannot read). Logback reads the message of
   * every exception of a line, the causes' too, so each of the run's log calls threw instead of
   * logging: the count's WARN threw before the listener heard the backlog was unknown (its gauge
   * kept the last count), and the failed run's WARN threw too. The schedule went on, but run after
   * run failed without a word while the table grew.
   */
  @Test
  void aScheduledRunFailingWithAnUnprintableExceptionIsLoggedAndTheBacklogShownUnknown()
      throws SQLException {
    AtomicInteger failuresLeft = new AtomicInteger();
    DataSource unprintableFailures =
        failingConnections(
            failuresLeft,
            () ->
                new IllegalStateException() {
                  private static final long serialVersionUID = 1L;

                  @Override
                  public String getMessage() {
                    throw new IllegalStateException("lookup key not readable");
                  }
                });
    AtomicInteger toldUnknown = new AtomicInteger();
    DedupListener backlog =
        new DedupListener() {
          @Override
          public void purgeBacklogUnknown(RuntimeException error) {
            toldUnknown.incrementAndGet();
          }
        };
    Logger janitorLog = (Logger) LoggerFactory.getLogger(DedupJanitor.class);
    ListAppender<ILoggingEvent> logged = new ListAppender<>();
    logged.start();
    janitorLog.addAppender(logged);
    DedupJanitor janitor =
        DedupJanitor.builder(JdbcDedupStore.builder(unprintableFailures).build())
            .batchSize(500)
            .interval(Duration.ofMillis(100))
            .listener(backlog)
            .build();
    try {
      failuresLeft.set(6);
      janitor.start();
      awaitNoExpiredLeft(
          Duration.ofSeconds(10),
          "expired records left once the DataSource gave connections again");
    } finally {
      janitor.close();
      janitorLog.detachAppender(logged);
    }
    assertThat(failuresLeft).as("connections refused with the unprintable exception").hasValue(0);
    assertThat(toldUnknown)
        .as("times the listener heard the backlog was unknown, of 3 failed counts")
        .hasValue(3);
    assertThat(logged.list)
        .filteredOn(event -> event.getLevel() == Level.WARN)
        .extracting(ILoggingEvent::getFormattedMessage)
        .as("the janitor's WARNs while the DataSource failed")
        .anyMatch(message -> message.startsWith("Purge of expired dedup records failed"))
        .anyMatch(message -> message.startsWith("Could not count the backlog"));
    assertThat(logged.list)
        .filteredOn(
            event ->
                event.getFormattedMessage().startsWith("Purge of expired dedup records failed"))
        .first()
        .satisfies(
            warning ->
                assertThat(warning.getThrowableProxy().getMessage())
                    .contains("the DataSource gave no connection")
                    .contains("its getMessage() threw"));
    assertThat(count("kept-%")).isEqualTo(100);
  }

  /** Waits until a janitor running on its schedule has purged every expired record. */
  private void awaitNoExpiredLeft(Duration atMost, String left) {
    awaitNoExpiredLeft(atMost, () -> left);
  }

  /** As above; {@code left} is read at each try, so a failure names the counts of its last one. */
  private void awaitNoExpiredLeft(Duration atMost, Supplier<String> left) {
    await().atMost(atMost).untilAsserted(() -> assertThat(count("expired-%")).as(left).isZero());
  }

  /**
   * The janitor's scheduler, whose {@code nth} schedule call throws an {@code OutOfMemoryError} (as
   * the scheduler allocates the task), counted in {@code refused}.
   */
  private static Function<ThreadFactory, ScheduledThreadPoolExecutor> refusingSchedule(
      int nth, String scheduling, AtomicInteger refused) {
    AtomicInteger schedules = new AtomicInteger();
    return threads ->
        new ScheduledThreadPoolExecutor(1, threads) {
          @Override
          public ScheduledFuture<?> schedule(Runnable command, long delay, TimeUnit unit) {
            if (schedules.incrementAndGet() == nth) {
              refused.incrementAndGet();
              throw new OutOfMemoryError("Java heap space, " + scheduling);
            }
            return super.schedule(command, delay, unit);
          }
        };
  }

  private int count(String pattern) throws SQLException {
    try (Connection connection = dataSource.getConnection();
        Statement statement = connection.createStatement();
        ResultSet row =
            statement.executeQuery(
                "SELECT count(*) FROM consumer_dedup WHERE biz_key LIKE '" + pattern + "'")) {
      row.next();
      return row.getInt(1);
    }
  }

  private void execute(String sql) throws SQLException {
    try (Connection connection = dataSource.getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute(sql);
    }
  }

  /**
   * The test's DataSource, whose next {@code failuresLeft} connections are refused with what {@code
   * failure} makes (an {@code Error} or a {@code RuntimeException}).
   */
  private DataSource failingConnections(AtomicInteger failuresLeft, Supplier<Throwable> failure) {
    return (DataSource)
        java.lang.reflect.Proxy.newProxyInstance(
            DataSource.class.getClassLoader(),
            new Class<?>[] {DataSource.class},
            (proxy, method, args) -> {
              if (method.getName().equals("getConnection")
                  && failuresLeft.getAndUpdate(n -> Math.max(0, n - 1)) > 0) {
                throw failure.get();
              }
              try {
                return method.invoke(dataSource, args);
              } catch (java.lang.reflect.InvocationTargetException e) {
                throw e.getCause();
              }
            });
  }
}
