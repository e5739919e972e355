package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.TransactionBoundDataSource;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.slf4j.LoggerFactory;

/**
 * A record whose status a newer version of consumer-dedup wrote (a rolling upgrade, the table's
 * status check widened by its migration), met by this version's consumers: its key is held like one
 * in progress elsewhere, neither handled nor dead-lettered, and the other keys go on. One subclass
 * per dialect, a table of its own per class.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
abstract class StatusOfANewerVersionTests {
  private static final String NEWER_STATUS = "ABANDONED";

  private HikariDataSource dataSource;
  private IdempotentExecutor executor;
  private TransactionBoundDataSource transactions;
  private IdempotentExecutor transactional;
  private final ListAppender<ILoggingEvent> logged = new ListAppender<>();
  private final Logger executorLog = (Logger) LoggerFactory.getLogger(IdempotentExecutor.class);

  /** A pool on a fresh database or schema holding the dedup table. */
  abstract HikariDataSource createDataSource();

  /** Drops what {@link #createDataSource()} created. */
  abstract void dropDatabase();

  @BeforeAll
  void setUp() throws SQLException {
    dataSource = createDataSource();
    executor = IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build()).build();
    transactions = TransactionBoundDataSource.of(dataSource);
    transactional =
        IdempotentExecutor.builder(JdbcDedupStore.builder(transactions).build())
            .mode(DedupMode.TRANSACTIONAL)
            .build();
    try (Connection connection = dataSource.getConnection();
        Statement statement = connection.createStatement()) {
      // What the newer version's migration does before it writes its new status.
      statement.execute("ALTER TABLE consumer_dedup DROP CONSTRAINT consumer_dedup_status_ck");
    }
  }

  @AfterAll
  void tearDown() {
    if (dataSource != null) {
      executor.close();
      transactional.close();
      dataSource.close();
      dropDatabase();
    }
  }

  @BeforeEach
  void captureLog() {
    logged.start();
    executorLog.addAppender(logged);
  }

  @AfterEach
  void releaseLog() {
    executorLog.detachAppender(logged);
  }

  @Test
  void aPollsClaimHoldsTheKeyOfAStatusItDoesNotKnowAndClaimsTheOthers() throws SQLException {
    DedupKey done = DedupKey.of("u-order", "done");
    executor.execute(done, () -> "applied");
    DedupKey newer = DedupKey.of("u-order", "newer");
    executor.execute(newer, () -> "applied");
    writeStatusOfANewerVersion(newer);
    DedupKey fresh = DedupKey.of("u-order", "fresh");
    List<IdempotentExecutor.Delivery> poll =
        List.of(
            new IdempotentExecutor.Delivery(fresh, null, "orders-0@1"),
            new IdempotentExecutor.Delivery(newer, null, "orders-0@2"),
            new IdempotentExecutor.Delivery(done, null, "orders-0@3"));

    DedupClaims[] claims = new DedupClaims[1];
    Throwable claimed = catchThrowable(() -> claims[0] = executor.claimAll(poll));

    assertThat(claimed).as("the poll's claim, one of its keys " + NEWER_STATUS).isNull();
    DedupClaim freshClaim = claims[0].get(0);
    assertThat(freshClaim.isDuplicate()).as("the new key of the poll").isFalse();
    freshClaim.complete();
    Throwable held = catchThrowable(() -> claims[0].get(1));
    assertThat(held)
        .as("the key of status " + NEWER_STATUS)
        .isInstanceOf(DedupInProgressException.class);
    assertThat(Disposition.of(held)).isEqualTo(Disposition.RETRY_LATER);
    assertThat(held.getMessage()).contains("'" + NEWER_STATUS + "'");
    assertThat(claims[0].get(2).isDuplicate()).as("the key done before").isTrue();
    assertHeldAsStored(newer);
  }

  @Test
  void aClaimOfOneKeyHoldsAStatusItDoesNotKnowWithoutRunningTheHandler() throws SQLException {
    DedupKey newer = DedupKey.of("u-payment", "newer");
    executor.execute(newer, () -> "applied");
    writeStatusOfANewerVersion(newer);
    AtomicInteger runs = new AtomicInteger();

    Throwable held = catchThrowable(() -> executor.execute(newer, runs::incrementAndGet));

    assertThat(held)
        .as("the claim of a key of status " + NEWER_STATUS)
        .isInstanceOf(DedupInProgressException.class);
    assertThat(Disposition.of(held)).isEqualTo(Disposition.RETRY_LATER);
    assertThat(runs).as("the handler's runs").hasValue(0);
    assertHeldAsStored(newer);
  }

  @Test
  void aClaimInTheCallersTransactionHoldsAStatusItDoesNotKnow() throws SQLException {
    DedupKey newer = DedupKey.of("u-points", "newer");
    executor.execute(newer, () -> "applied");
    writeStatusOfANewerVersion(newer);
    AtomicInteger runs = new AtomicInteger();

    Throwable held =
        catchThrowable(
            () ->
                transactions.inTransaction(
                    () -> transactional.execute(newer, runs::incrementAndGet)));

    assertThat(held)
        .as("the claim in a transaction of a key of status " + NEWER_STATUS)
        .isInstanceOf(DedupInProgressException.class);
    assertThat(Disposition.of(held)).isEqualTo(Disposition.RETRY_LATER);
    assertThat(runs).as("the handler's runs").hasValue(0);
    assertHeldAsStored(newer);
  }

  /** The record is left as the newer version wrote it, and a WARN names its key and status. */
  private void assertHeldAsStored(DedupKey key) {
    DedupRecord record = executor.store().find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.UNKNOWN);
    assertThat(record.storedStatus()).isEqualTo(NEWER_STATUS);
    assertThat(record.attempts()).as("the attempts of the record").isEqualTo(1);
    assertThat(logged.list)
        .anySatisfy(
            event -> {
              assertThat(event.getLevel()).isEqualTo(Level.WARN);
              assertThat(event.getFormattedMessage())
                  .contains(key.toString())
                  .contains("'" + NEWER_STATUS + "'");
            });
  }

  private void writeStatusOfANewerVersion(DedupKey key) throws SQLException {
    try (Connection connection = dataSource.getConnection();
        PreparedStatement update =
            connection.prepareStatement(
                "UPDATE consumer_dedup SET status = ? WHERE biz_type = ? AND biz_key = ?")) {
      update.setString(1, NEWER_STATUS);
      update.setString(2, key.bizType());
      update.setString(3, key.bizKey());
      assertThat(update.executeUpdate()).isEqualTo(1);
    }
  }
}
