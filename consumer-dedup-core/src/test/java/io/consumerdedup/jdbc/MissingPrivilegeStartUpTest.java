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
 * The DataSource's role was granted SELECT and INSERT on the dedup table, not UPDATE and DELETE (a
 * grant written for an append-only table). The table's columns are all there, so the start-up check
 * passed; every claim was then refused.
 */
class MissingPrivilegeStartUpTest {
  @RegisterExtension static final StoreFixture fixture = new StoreFixture("privilege", 1);

  private final String role = "dedup_insert_only_" + UUID.randomUUID().toString().substring(0, 8);
  private final ListAppender<ILoggingEvent> logged = new ListAppender<>();
  private final Logger storeLog = (Logger) LoggerFactory.getLogger(JdbcDedupStore.class);
  private HikariDataSource pool;

  @BeforeEach
  void setUp() throws SQLException {
    String table = fixture.schema() + ".consumer_dedup";
    execute("CREATE ROLE " + role + " NOLOGIN");
    execute("GRANT USAGE ON SCHEMA " + fixture.schema() + " TO " + role);
    execute("GRANT SELECT, INSERT ON " + table + " TO " + role);
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

  @Test
  void aRoleWithoutUpdateAndDeleteIsNamedWithTheGrantWhenTheExecutorIsBuilt() {
    JdbcDedupStore store = JdbcDedupStore.builder(pool).build();
    AtomicInteger applied = new AtomicInteger();

    try (IdempotentExecutor executor = IdempotentExecutor.builder(store).build()) {
      assertThatThrownBy(
              () -> executor.execute(DedupKey.of("payment", "ORD-1"), applied::incrementAndGet))
          .as("a claim of the role")
          .isInstanceOf(DedupStoreException.class)
          .hasMessageContaining("permission denied");
    }
    assertThat(applied).as("handlers run").hasValue(0);

    assertThat(logged.list)
        .filteredOn(event -> event.getLevel() == Level.WARN)
        .extracting(ILoggingEvent::getFormattedMessage)
        .as("warnings as the executor was built")
        .anySatisfy(
            warning ->
                assertThat(warning)
                    .contains("lacks UPDATE, DELETE on the dedup table")
                    .contains("GRANT SELECT, INSERT, UPDATE, DELETE ON"));
  }

  private static void execute(String sql) throws SQLException {
    try (Connection connection = fixture.dataSource().getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute(sql);
    }
  }
}
