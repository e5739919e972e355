package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.StoreFixture;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.LoggerFactory;

/**
 * The DataSource's role holds its privileges on the dedup table column by column (a grant that
 * keeps the key columns from being updated), not on the whole table. PostgreSQL's table privilege
 * answers false for such a role, though the store's statements run.
 */
class ColumnPrivilegeStartUpTest {
  @RegisterExtension static final StoreFixture fixture = new StoreFixture("column_privilege", 1);

  private static final String ALL_COLUMNS =
      "biz_type, biz_key, status, attempts, owner, lease_until, fingerprint, last_error, source,"
          + " created_at, updated_at, expires_at, claim_id";
  private static final String UPDATED_COLUMNS =
      "status, attempts, owner, lease_until, fingerprint, last_error, source, updated_at,"
          + " expires_at";

  private final String role = "dedup_columns_" + UUID.randomUUID().toString().substring(0, 8);
  private final ListAppender<ILoggingEvent> logged = new ListAppender<>();
  private final Logger storeLog = (Logger) LoggerFactory.getLogger(JdbcDedupStore.class);
  private final String table = fixture.schema() + ".consumer_dedup";
  private HikariDataSource pool;

  @BeforeEach
  void setUp() throws SQLException {
    execute("CREATE ROLE " + role + " NOLOGIN");
    execute("GRANT USAGE ON SCHEMA " + fixture.schema() + " TO " + role);
    execute("GRANT DELETE ON " + table + " TO " + role);
    execute(
        "GRANT SELECT ("
            + ALL_COLUMNS
            + "), INSERT ("
            + ALL_COLUMNS
            + ") ON "
            + table
            + " TO "
            + role);
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(TestDatabase.url(fixture.schema()));
    config.setConnectionInitSql("SET ROLE " + role);
    config.setMaximumPoolSize(2);
    pool = new HikariDataSource(config);
    logged.start();
    storeLog.addAppender(logged);
  }

  @AfterEach
  void tearDown() throws SQLException {
    storeLog.detachAppender(logged);
    pool.close();
    execute("DROP OWNED BY " + role);
    execute("DROP ROLE " + role);
  }

  /**
   * Granted each column the store writes, the role was told at WARN that it lacked SELECT, INSERT
   * and UPDATE, with a GRANT to run that it did not need.
   */
  @Test
  void aRoleGrantedTheColumnsTheStoreUsesIsNotWarnedOf() throws SQLException {
    execute("GRANT UPDATE (" + UPDATED_COLUMNS + ", claim_id) ON " + table + " TO " + role);
    JdbcDedupStore store = JdbcDedupStore.builder(pool).build();
    AtomicInteger applied = new AtomicInteger();

    try (IdempotentExecutor executor = IdempotentExecutor.builder(store).build()) {
      executor.execute(DedupKey.of("payment", "ORD-1"), applied::incrementAndGet);
      assertThatThrownBy(
              () ->
                  executor.execute(
                      DedupKey.of("payment", "ORD-2"),
                      () -> {
                        throw new IllegalStateException("card declined");
                      }))
          .as("a handler that fails: its FAILED is written")
          .isNotInstanceOf(DedupStoreException.class);
      executor.execute(DedupKey.of("payment", "ORD-2"), applied::incrementAndGet);
    }
    assertThat(applied).as("handlers run, under the role's column grants").hasValue(2);
    assertThat(store.missingPrivilegesNow())
        .as("the privileges the health check finds missing")
        .isEmpty();

    assertThat(logged.list)
        .filteredOn(event -> event.getLevel() == Level.WARN)
        .extracting(ILoggingEvent::getFormattedMessage)
        .as("warnings as the executor was built")
        .noneMatch(warning -> warning.contains("lacks"));
  }

  /**
   * One column left out of the role's UPDATE grant: each claim is refused, and the WARN names it.
   */
  @Test
  void aColumnLeftOutOfAColumnGrantIsNamedInTheWarning() {
    try {
      execute("GRANT UPDATE (" + UPDATED_COLUMNS + ") ON " + table + " TO " + role);
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
    JdbcDedupStore store = JdbcDedupStore.builder(pool).build();

    assertThat(store.missingPrivilegesNow())
        .as("the privileges the health check finds missing")
        .containsExactly("UPDATE");
    try (IdempotentExecutor executor = IdempotentExecutor.builder(store).build()) {
      assertThatThrownBy(() -> executor.execute(DedupKey.of("payment", "ORD-3"), () -> "charged"))
          .as("a claim of the role")
          .isInstanceOf(DedupStoreException.class)
          .hasMessageContaining("permission denied");
    }

    assertThat(logged.list)
        .filteredOn(event -> event.getLevel() == Level.WARN)
        .extracting(ILoggingEvent::getFormattedMessage)
        .as("warnings as the executor was built")
        .anySatisfy(
            warning ->
                assertThat(warning)
                    .contains("lacks UPDATE (of claim_id) on the dedup table")
                    .doesNotContain("lacks SELECT")
                    .contains("GRANT SELECT, INSERT, UPDATE, DELETE ON"));
  }

  private static void execute(String sql) throws SQLException {
    try (Connection connection = fixture.dataSource().getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute(sql);
    }
  }
}
