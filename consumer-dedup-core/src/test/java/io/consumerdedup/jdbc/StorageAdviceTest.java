package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.IdempotentExecutor;
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
 * A table made from an earlier schema file (fillfactor 80) or by hand (PostgreSQL's default, 100)
 * works, but its marks write index entries that a table at the schema file's 50 avoids: the user
 * sees one WARN at start-up with the statement that fixes it, and none for a table from the current
 * schema file.
 */
class StorageAdviceTest {
  private String schema;
  private HikariDataSource pool;
  private final ListAppender<ILoggingEvent> logged = new ListAppender<>();
  private final Logger storeLog = (Logger) LoggerFactory.getLogger(JdbcDedupStore.class);

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("storage_advice");
    pool = TestDatabase.dataSource(schema, 2);
    logged.start();
    storeLog.addAppender(logged);
  }

  @AfterEach
  void tearDown() {
    storeLog.detachAppender(logged);
    pool.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void aTableFromAnEarlierSchemaFileIsNamedOnceWithTheStatementThatFixesIt() throws Exception {
    execute("ALTER TABLE consumer_dedup SET (fillfactor = 80)");
    JdbcDedupStore store = JdbcDedupStore.builder(pool).build();

    IdempotentExecutor.builder(store).build().close();
    IdempotentExecutor.builder(store).build().close();

    assertThat(warnings())
        .singleElement()
        .asString()
        .contains("The dedup table consumer_dedup has fillfactor 80 (the schema file sets 50)")
        .contains("ALTER TABLE consumer_dedup SET (fillfactor = 50);");
  }

  @Test
  void aTableMadeWithoutAFillfactorIsNamedWithPostgresDefault() throws Exception {
    execute("ALTER TABLE consumer_dedup RESET (fillfactor)");

    IdempotentExecutor.builder(JdbcDedupStore.builder(pool).build()).build().close();

    assertThat(warnings()).singleElement().asString().contains("has fillfactor 100");
  }

  @Test
  void aTableFromTheSchemaFileIsNotNamed() {
    IdempotentExecutor.builder(JdbcDedupStore.builder(pool).build()).build().close();

    assertThat(warnings()).isEmpty();
  }

  private List<String> warnings() {
    return logged.list.stream()
        .filter(event -> event.getLevel() == Level.WARN)
        .map(ILoggingEvent::getFormattedMessage)
        .toList();
  }

  private void execute(String sql) throws SQLException {
    try (Connection connection = pool.getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute(sql);
    }
  }
}
