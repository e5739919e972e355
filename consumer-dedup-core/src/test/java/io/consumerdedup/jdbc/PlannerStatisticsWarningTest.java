package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;

/**
 * A dedup table that autovacuum never visits and that was never analyzed gets the batches of its
 * retention purge planned as scans of the whole table (at 1M rows, 280 ms a batch of 1,000 instead
 * of 5). The store says so at start-up, once, with the fix; not once the table has statistics. The
 * statements for a poll's keys (claims, marks, renewals, releases) no longer depend on statistics,
 * so the warning does not name them.
 */
class PlannerStatisticsWarningTest {
  private final ListAppender<ILoggingEvent> logged = new ListAppender<>();
  private final Logger storeLogger = (Logger) LoggerFactory.getLogger(JdbcDedupStore.class);
  private String schema;
  private HikariDataSource dataSource;

  @BeforeEach
  void setUp() throws SQLException {
    schema = TestDatabase.newSchema("statistics");
    dataSource = TestDatabase.dataSource(schema, 2);
    execute("ALTER TABLE consumer_dedup SET (autovacuum_enabled = false)");
    logged.start();
    storeLogger.addAppender(logged);
  }

  @AfterEach
  void tearDown() {
    storeLogger.detachAppender(logged);
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void aTableWithoutStatisticsThatAutovacuumSkipsIsReportedOnceWithTheFix() {
    JdbcDedupStore store = JdbcDedupStore.builder(dataSource).build();

    store.verifyReady();
    store.verifyReady(); // an executor built again: told once

    assertThat(warnings())
        .singleElement()
        .satisfies(
            message ->
                assertThat(message)
                    .contains("consumer_dedup has no planner statistics and autovacuum is off")
                    .contains("each batch of the retention purge by scanning the whole table")
                    .doesNotContain("may then renew")
                    .contains("run ANALYZE consumer_dedup"));
  }

  @Test
  void aTableWithStatisticsIsNotReported() throws SQLException {
    execute(
        "INSERT INTO consumer_dedup (biz_type, biz_key, status, owner, expires_at)"
            + " SELECT 'order', 'o-' || g, 'SUCCESS', 'consumer-a', now() + interval '7 days'"
            + " FROM generate_series(1, 1000) g");
    execute("ANALYZE consumer_dedup");

    JdbcDedupStore.builder(dataSource).build().verifyReady();

    assertThat(warnings()).isEmpty();
  }

  private List<String> warnings() {
    return logged.list.stream()
        .filter(event -> event.getLevel() == Level.WARN)
        .map(ILoggingEvent::getFormattedMessage)
        .toList();
  }

  private void execute(String sql) throws SQLException {
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute(sql);
    }
  }
}
