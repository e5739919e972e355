package io.consumerdedup.jdbc.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.testing.TestDatabase;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The store's statements on pgjdbc are bounded by {@link StatementWatchdog} instead of the driver's
 * query timeout: a statement that outruns its timeout is cancelled by the server (SQL state 57014,
 * which the store retries as any statement timeout), and one that finished in time leaves the
 * connection's later statements alone. Real PostgreSQL.
 */
class StatementWatchdogTest {

  private final StatementWatchdog watchdog = new StatementWatchdog(Duration.ofMillis(50));
  private String schema;
  private Connection connection;

  @BeforeEach
  void connect() throws SQLException {
    schema = TestDatabase.newSchema("watchdog");
    connection = TestDatabase.connect(schema);
  }

  @AfterEach
  void close() throws SQLException {
    connection.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void aStatementThatOutrunsItsTimeoutIsCancelledByTheServer() throws SQLException {
    try (PreparedStatement sleep = connection.prepareStatement("SELECT pg_sleep(60)")) {
      assertThat(StatementWatchdog.canWatch(sleep)).as("a pgjdbc statement is watched").isTrue();
      assertThat(watchdog.watch(sleep, Duration.ofSeconds(1))).isTrue();
      long start = System.nanoTime();
      assertThatThrownBy(sleep::executeQuery)
          .as("[the caller's error] a statement of 60 s with a timeout of 1 s")
          .isInstanceOfSatisfying(
              SQLException.class,
              e -> assertThat(e.getSQLState()).as("query_canceled").isEqualTo("57014"));
      assertThat(Duration.ofNanos(System.nanoTime() - start))
          .as("[how long the caller waited] cancelled near its timeout, not after the statement")
          .isLessThan(Duration.ofSeconds(30));
    }
    assertThat(SqlStates.isTransient(cancelled()))
        .as("the store retries a cancelled statement as any statement timeout")
        .isTrue();
  }

  @Test
  void aStatementThatFinishedInTimeLeavesTheConnectionsNextStatementAlone() throws SQLException {
    try (PreparedStatement quick = connection.prepareStatement("SELECT 1")) {
      watchdog.watch(quick, Duration.ofMillis(300));
      quick.executeQuery().close();
      // Still open when its deadline passes, while the connection runs a longer statement.
      try (PreparedStatement longer = connection.prepareStatement("SELECT pg_sleep(1.5), 42");
          ResultSet row = longer.executeQuery()) {
        assertThat(row.next()).isTrue();
        assertThat(row.getInt(2))
            .as("[the next statement's answer] not cancelled by the earlier one's deadline")
            .isEqualTo(42);
      }
      await("past its deadline, no longer watched")
          .atMost(Duration.ofSeconds(20))
          .until(() -> watchdog.watchedCount() == 0);
    }
  }

  @Test
  void aClosedStatementIsForgottenBeforeItsDeadline() throws SQLException {
    try (PreparedStatement quick = connection.prepareStatement("SELECT 1")) {
      watchdog.watch(quick, Duration.ofMinutes(10));
      quick.executeQuery().close();
    }
    await("the closed statement forgotten")
        .atMost(Duration.ofSeconds(20))
        .until(() -> watchdog.watchedCount() == 0);
  }

  /**
   * A statement whose every look throws an Error (an OutOfMemoryError, a driver's Error) is watched
   * before a statement that outruns its timeout. The Error ended the watchdog's thread, and the
   * other statement ran on uncancelled until the store's next statement started another thread.
   */
  @Test
  void anErrorFromOneStatementStillLetsTheWatchdogCancelTheOthers() throws SQLException {
    AtomicInteger looks = new AtomicInteger();
    Statement failingAlways =
        (Statement)
            Proxy.newProxyInstance(
                getClass().getClassLoader(),
                new Class<?>[] {Statement.class},
                (proxy, method, args) -> {
                  if (method.getName().equals("isClosed")) {
                    looks.incrementAndGet();
                    throw new OutOfMemoryError("Java heap space (injected)");
                  }
                  return null;
                });
    watchdog.watch(failingAlways, Duration.ofMinutes(10));
    try (PreparedStatement sleep = connection.prepareStatement("SELECT pg_sleep(60)")) {
      watchdog.watch(sleep, Duration.ofSeconds(1));
      long start = System.nanoTime();
      assertThatThrownBy(sleep::executeQuery)
          .as("[the caller's error] a statement of 60 s with a timeout of 1 s")
          .isInstanceOfSatisfying(
              SQLException.class,
              e -> assertThat(e.getSQLState()).as("query_canceled").isEqualTo("57014"));
      assertThat(looks).as("the watchdog met the Error at each look").hasValueGreaterThan(1);
      assertThat(Duration.ofNanos(System.nanoTime() - start))
          .as("[how long the caller waited] cancelled near its timeout despite the Errors")
          .isLessThan(Duration.ofSeconds(30));
    }
  }

  /**
   * Two consumers' statements come together to a watchdog whose thread is not running (the first
   * statement after an idle end), and the thread the first one starts cannot start ("unable to
   * create native thread"). The second was answered as watched, so the store gave it no query
   * timeout either, although no thread would look at it: a claim behind a lock ran on until the
   * lock went, however long, rather than being cancelled at the statement timeout.
   */
  @Test
  void aStatementThatCameWhileAnotherCallersThreadFailedToStartIsStillCancelledAtItsTimeout()
      throws Exception {
    CountDownLatch firstStarting = new CountDownLatch(1);
    AtomicInteger starts = new AtomicInteger();
    AtomicReference<StatementWatchdog> underStart = new AtomicReference<>();
    StatementWatchdog starting =
        new StatementWatchdog(
            Duration.ofMillis(50),
            task -> {
              if (starts.getAndIncrement() > 0) {
                Thread thread = new Thread(task, "statement-watchdog-of-the-test");
                thread.setDaemon(true);
                return thread;
              }
              return new Thread(task) {
                @Override
                public synchronized void start() {
                  firstStarting.countDown();
                  // Fails once the second statement is added, as a start that takes a moment.
                  await()
                      .atMost(Duration.ofSeconds(10))
                      .until(() -> underStart.get().watchedCount() == 2);
                  throw new OutOfMemoryError(
                      "unable to create native thread: possibly out of memory or process/resource"
                          + " limits reached (injected)");
                }
              };
            });
    underStart.set(starting);
    Statement first = closedStatement();
    CompletableFuture<Boolean> firstWatched =
        CompletableFuture.supplyAsync(
            () -> starting.watch(first, Duration.ofSeconds(1)),
            runnable -> new Thread(runnable).start());
    assertThat(firstStarting.await(10, TimeUnit.SECONDS)).as("the first start under way").isTrue();
    try (PreparedStatement sleep = connection.prepareStatement("SELECT pg_sleep(10)")) {
      boundAsTheStoreDoes(starting, sleep, Duration.ofSeconds(1));
      long start = System.nanoTime();
      assertThatThrownBy(sleep::executeQuery)
          .as("[the caller's error] a statement of 10 s with a timeout of 1 s")
          .isInstanceOfSatisfying(
              SQLException.class,
              e -> assertThat(e.getSQLState()).as("query_canceled").isEqualTo("57014"));
      assertThat(Duration.ofNanos(System.nanoTime() - start))
          .as("[how long the caller waited] cancelled near its timeout")
          .isLessThan(Duration.ofSeconds(8));
    }
    assertThat(firstWatched.get(10, TimeUnit.SECONDS))
        .as("the first statement, whose start failed, has the driver's query timeout")
        .isFalse();
  }

  /** As the store's calls do: the driver's query timeout if the watchdog cannot watch it. */
  private static void boundAsTheStoreDoes(
      StatementWatchdog watchdog, Statement statement, Duration timeout) throws SQLException {
    if (!watchdog.watch(statement, timeout)) {
      statement.setQueryTimeout((int) timeout.toSeconds());
    }
  }

  private static Statement closedStatement() {
    return (Statement)
        Proxy.newProxyInstance(
            StatementWatchdogTest.class.getClassLoader(),
            new Class<?>[] {Statement.class},
            (proxy, method, args) -> method.getName().equals("isClosed") ? Boolean.TRUE : null);
  }

  private SQLException cancelled() {
    try (PreparedStatement sleep = connection.prepareStatement("SELECT pg_sleep(60)")) {
      watchdog.watch(sleep, Duration.ofMillis(200));
      sleep.executeQuery();
      throw new AssertionError("not cancelled");
    } catch (SQLException e) {
      return e;
    }
  }
}
