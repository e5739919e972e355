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
import io.consumerdedup.core.DedupTableMissingException;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.List;
import java.util.UUID;
import java.util.regex.MatchResult;
import java.util.regex.Pattern;
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

  /**
   * A table partitioned by hash of the key: PostgreSQL keeps a fillfactor on each partition and
   * refuses one on the partitioned table. The WARN names the partitions above 50, and the
   * statements it gives run and silence it.
   */
  @Test
  void aPartitionedTableIsAdvisedPerPartitionWithStatementsThatRun() throws Exception {
    execute(
        "CREATE TABLE dedup_hashed (LIKE consumer_dedup INCLUDING DEFAULTS INCLUDING CONSTRAINTS,"
            + " PRIMARY KEY (biz_type, biz_key)) PARTITION BY HASH (biz_key)");
    execute(
        "CREATE TABLE dedup_hashed_0 PARTITION OF dedup_hashed"
            + " FOR VALUES WITH (MODULUS 2, REMAINDER 0) WITH (fillfactor = 50)");
    execute(
        "CREATE TABLE dedup_hashed_1 PARTITION OF dedup_hashed"
            + " FOR VALUES WITH (MODULUS 2, REMAINDER 1)");

    IdempotentExecutor.builder(JdbcDedupStore.builder(pool).tableName("dedup_hashed").build())
        .build()
        .close();

    String warning = assertThat(warnings()).singleElement().actual();
    for (String advised : advisedStatements(warning)) {
      execute(advised);
    }
    assertThat(warning).contains("dedup_hashed_1 has fillfactor 100").doesNotContain("_0");
    logged.list.clear();
    IdempotentExecutor.builder(JdbcDedupStore.builder(pool).tableName("dedup_hashed").build())
        .build()
        .close();
    assertThat(warnings()).as("warnings once the advised statements ran").isEmpty();
  }

  private static List<String> advisedStatements(String warning) {
    List<String> statements =
        Pattern.compile("ALTER TABLE [^;]+;")
            .matcher(warning)
            .results()
            .map(MatchResult::group)
            .toList();
    assertThat(statements).as("the statements the WARN gives").isNotEmpty();
    return statements;
  }

  /**
   * A database whose owner took away the right to read {@code pg_class} from ordinary roles (a
   * hardened or shared host), the application's role among them: the storage advice, which reads
   * the table's options there, cannot be had. The check it rides with still tells a table that
   * lacks a column, so that the forgotten migration fails the start-up, not every record.
   */
  @Test
  void aRoleThatCannotReadTheCatalogsTableOptionsStillHasItsTableChecked() throws Exception {
    try (RestrictedDatabase restricted = new RestrictedDatabase()) {
      restricted.execute("ALTER TABLE consumer_dedup DROP COLUMN claim_id");
      JdbcDedupStore store = JdbcDedupStore.builder(restricted.pool()).build();

      assertThatThrownBy(() -> IdempotentExecutor.builder(store).build().close())
          .as("building an executor over a table that lacks claim_id")
          .isInstanceOf(DedupTableMissingException.class)
          .hasMessageContaining("claim_id");
    }
  }

  /** The same role over a complete table: nothing fails, nothing is said, records are claimed. */
  @Test
  void aRoleThatCannotReadTheCatalogsTableOptionsStartsAndClaims() throws Exception {
    try (RestrictedDatabase restricted = new RestrictedDatabase()) {
      JdbcDedupStore store = JdbcDedupStore.builder(restricted.pool()).build();

      store.verifyTable();
      try (IdempotentExecutor executor = IdempotentExecutor.builder(store).build()) {
        assertThat(executor.execute(DedupKey.of("advice", "k-1"), () -> "applied").value())
            .isEqualTo("applied");
      }
      assertThat(warnings()).isEmpty();
    }
  }

  private List<String> warnings() {
    return logged.list.stream()
        .filter(event -> event.getLevel() == Level.WARN)
        .map(ILoggingEvent::getFormattedMessage)
        .toList();
  }

  /**
   * A database of its own, so that taking the right to read {@code pg_class} from PUBLIC touches no
   * other test, with the dedup table and a role that may use it and nothing more; the pool's
   * connections act as that role.
   */
  private static final class RestrictedDatabase implements AutoCloseable {
    private final String name = "dedup_restricted_" + UUID.randomUUID().toString().substring(0, 8);
    private final String url;
    private final HikariDataSource pool;

    RestrictedDatabase() throws SQLException {
      try (Connection server = DriverManager.getConnection(TestDatabase.baseUrl());
          Statement statement = server.createStatement()) {
        statement.execute("CREATE DATABASE " + name);
        statement.execute("CREATE ROLE " + name + " NOLOGIN");
      }
      url = TestDatabase.baseUrl().replaceFirst("^(jdbc:postgresql://[^/?]+/)[^?]*", "$1" + name);
      try (Connection owner = DriverManager.getConnection(url);
          Statement statement = owner.createStatement()) {
        statement.execute("REVOKE SELECT ON pg_catalog.pg_class FROM PUBLIC");
        statement.execute(TestDatabase.schemaDdl());
        statement.execute("GRANT ALL ON ALL TABLES IN SCHEMA public TO " + name);
      }
      try (Connection role = DriverManager.getConnection(url);
          Statement statement = role.createStatement()) {
        statement.execute("SET ROLE " + name);
        assertThatThrownBy(
                () -> statement.executeQuery("SELECT reloptions FROM pg_class LIMIT 1").close())
            .as("the role reading pg_class")
            .hasMessageContaining("permission denied");
      }
      HikariConfig config = new HikariConfig();
      config.setJdbcUrl(url);
      config.setConnectionInitSql("SET ROLE " + name);
      config.setMaximumPoolSize(2);
      pool = new HikariDataSource(config);
    }

    HikariDataSource pool() {
      return pool;
    }

    void execute(String sql) throws SQLException {
      try (Connection owner = DriverManager.getConnection(url);
          Statement statement = owner.createStatement()) {
        statement.execute(sql);
      }
    }

    @Override
    public void close() throws SQLException {
      pool.close();
      try (Connection server = DriverManager.getConnection(TestDatabase.baseUrl());
          Statement statement = server.createStatement()) {
        statement.execute("DROP DATABASE IF EXISTS " + name);
        statement.execute("DROP ROLE IF EXISTS " + name);
      }
    }
  }

  private void execute(String sql) throws SQLException {
    try (Connection connection = pool.getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute(sql);
    }
  }
}
