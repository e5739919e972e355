package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * On a PostgreSQL database whose collation is not C (here ICU's en-US, which sorts "b" before "C"),
 * every statement that locks several keys locks them in one order: the claims and the outcomes,
 * which the database orders, and the renewals, which the store orders. In two orders, a holder's
 * renewal and its own outcome write (or two consumers' batches) each locked a key the other waited
 * for, and the database broke the deadlock by failing one of them. The order is code point order,
 * which is also the order of the bytes of UTF-8 ({@code COLLATE "C"}): a supplementary character
 * (an emoji) sorts after U+FFFD there, where Java's {@code String.compareTo} put it before.
 *
 * <p>Each test holds the row of the key that comes last in that order locked, starts the statement,
 * waits until it waits for that lock, and then finds the first key's row locked by it.
 */
class KeyLockOrderCollationTest {
  private static final Pattern DATABASE_IN_URL =
      Pattern.compile("(jdbc:postgresql://[^/]+/)([^?]*)(.*)");
  private static final Duration LEASE = Duration.ofMinutes(1);
  private static final Duration RETENTION = Duration.ofDays(1);

  private static String database;
  private static String url;
  private static HikariDataSource dataSource;

  @BeforeAll
  static void createDatabaseWithALanguagesCollation() throws SQLException {
    database = "dedup_collation_" + UUID.randomUUID().toString().substring(0, 8);
    try (Connection connection = DriverManager.getConnection(TestDatabase.baseUrl());
        Statement statement = connection.createStatement()) {
      // A database of its own with an ICU collation needs PostgreSQL 15, which CI runs.
      Assumptions.assumeTrue(
          connection.getMetaData().getDatabaseMajorVersion() >= 15,
          "a database with an ICU collation needs PostgreSQL 15 or later");
      statement.execute(
          "CREATE DATABASE "
              + database
              + " TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US'"
              + " LOCALE 'C.UTF-8'");
    }
    Matcher base = DATABASE_IN_URL.matcher(TestDatabase.baseUrl());
    assertThat(base.matches()).as("the test database's URL names a database").isTrue();
    url = base.group(1) + database + base.group(3);
    try (Connection connection = DriverManager.getConnection(url);
        Statement statement = connection.createStatement()) {
      statement.execute(TestDatabase.schemaDdl());
      try (ResultSet order = statement.executeQuery("SELECT 'b' < 'C'")) {
        order.next();
        assertThat(order.getBoolean(1))
            .as("the database's collation sorts 'b' before 'C', as C does not")
            .isTrue();
      }
    }
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(url);
    config.setMaximumPoolSize(4);
    dataSource = new HikariDataSource(config);
  }

  @AfterAll
  static void dropDatabase() throws SQLException {
    if (dataSource == null) {
      return; // skipped before it was made
    }
    dataSource.close();
    try (Connection connection = DriverManager.getConnection(TestDatabase.baseUrl());
        Statement statement = connection.createStatement()) {
      statement.execute("DROP DATABASE IF EXISTS " + database + " WITH (FORCE)");
    }
  }

  /** The keys in code point order: the first, then the last. */
  @ParameterizedTest(name = "{0}: {1} before {2}")
  @CsvSource({
    "claim, C, b",
    "complete, C, b",
    "renew, C, b",
    "release, C, b",
    "claim, \uFFFD, \uD83D\uDE00",
    "complete, \uFFFD, \uD83D\uDE00",
    "renew, \uFFFD, \uD83D\uDE00",
    "release, \uFFFD, \uD83D\uDE00"
  })
  void aStatementOfSeveralKeysLocksThemInCodePointOrder(String operation, String first, String last)
      throws Exception {
    JdbcDedupStore store =
        JdbcDedupStore.builder(dataSource).statementTimeout(Duration.ofSeconds(30)).build();
    String type = "order-" + UUID.randomUUID().toString().substring(0, 8);
    DedupKey firstKey = DedupKey.of(type, first);
    DedupKey lastKey = DedupKey.of(type, last);
    List<ClaimResult.Claimed> held =
        store.claimAll(List.of(request(lastKey), request(firstKey))).stream()
            .map(ClaimResult.Claimed.class::cast)
            .toList();
    Function<JdbcDedupStore, Object> call =
        switch (operation) {
          case "claim" -> {
            // Rows a claim takes (FAILED), so that it locks them.
            assertThat(store.failAll(failures(held), RETENTION)).isEmpty();
            yield s -> s.claimAll(List.of(request(lastKey), request(firstKey)));
          }
          case "complete" -> s -> s.completeAll(held, RETENTION);
          case "renew" -> s -> s.renewAll(held, LEASE);
          case "release" -> s -> s.releaseAll(held);
          default -> throw new IllegalArgumentException(operation);
        };

    try (Connection locker = dataSource.getConnection()) {
      locker.setAutoCommit(false);
      lockRow(locker, lastKey);
      CompletableFuture<Object> running = CompletableFuture.supplyAsync(() -> call.apply(store));
      try {
        await()
            .atMost(Duration.ofSeconds(20))
            .pollInterval(Duration.ofMillis(20))
            .until(KeyLockOrderCollationTest::aStatementWaitsForALock);
        assertThat(isLocked(firstKey))
            .as(
                "the row of %s, first in code point order, locked by the %s waiting for %s",
                first, operation, last)
            .isTrue();
      } finally {
        locker.rollback();
      }
      running.get(30, TimeUnit.SECONDS);
    }
  }

  private static ClaimRequest request(DedupKey key) {
    return new ClaimRequest(key, "consumer-a", LEASE, RETENTION, null, null);
  }

  private static List<io.consumerdedup.core.DedupStore.Failure> failures(
      List<ClaimResult.Claimed> claims) {
    return claims.stream()
        .map(claim -> new io.consumerdedup.core.DedupStore.Failure(claim, "failed"))
        .toList();
  }

  private static void lockRow(Connection connection, DedupKey key) throws SQLException {
    try (PreparedStatement lock =
        connection.prepareStatement(
            "SELECT 1 FROM consumer_dedup WHERE biz_type = ? AND biz_key = ? FOR UPDATE")) {
      lock.setString(1, key.bizType());
      lock.setString(2, key.bizKey());
      try (ResultSet row = lock.executeQuery()) {
        assertThat(row.next()).as("the row of %s", key).isTrue();
      }
    }
  }

  private static boolean aStatementWaitsForALock() throws SQLException {
    try (Connection connection = DriverManager.getConnection(url);
        Statement statement = connection.createStatement();
        ResultSet waiting =
            statement.executeQuery(
                "SELECT count(*) FROM pg_stat_activity"
                    + " WHERE datname = current_database() AND wait_event_type = 'Lock'")) {
      waiting.next();
      return waiting.getInt(1) > 0;
    }
  }

  /** Whether another transaction holds the row of {@code key} locked. */
  private static boolean isLocked(DedupKey key) throws SQLException {
    try (Connection connection = DriverManager.getConnection(url);
        PreparedStatement probe =
            connection.prepareStatement(
                "SELECT 1 FROM consumer_dedup WHERE biz_type = ? AND biz_key = ?"
                    + " FOR UPDATE NOWAIT")) {
      connection.setAutoCommit(false);
      probe.setString(1, key.bizType());
      probe.setString(2, key.bizKey());
      try (ResultSet row = probe.executeQuery()) {
        assertThat(row.next()).as("the row of %s", key).isTrue();
        return false;
      } catch (SQLException e) {
        if ("55P03".equals(e.getSQLState())) {
          return true;
        }
        throw e;
      } finally {
        connection.rollback();
      }
    }
  }
}
