package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.SqlDialect;
import io.consumerdedup.jdbc.internal.SqlStates;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.Objects;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.sql.DataSource;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.beans.factory.InitializingBean;
import org.springframework.core.io.ByteArrayResource;
import org.springframework.jdbc.datasource.init.ScriptUtils;

/**
 * {@code consumer-dedup.initialize-schema=always}: creates the dedup table from the shipped script
 * {@value #SCRIPT} when it does not exist yet, under the configured table name. Instances starting
 * together serialise on a PostgreSQL advisory lock, so exactly one creates the table. Behind a
 * connection pooler its statements are unnamed, as the store's are.
 *
 * <p>A custom name replaces the script's table name and prefixes its constraint and index names
 * with the (unqualified) custom name, so two dedup tables can share a schema.
 */
public final class DedupSchemaInitializer implements InitializingBean {

  /** The shipped DDL, on the classpath from the consumer-dedup-schema artifact. */
  public static final String SCRIPT = JdbcDedupStore.SCHEMA_RESOURCE;

  private static final String SCRIPT_TABLE = "consumer_dedup";
  private static final Pattern TABLE_REFERENCE = Pattern.compile("\\bconsumer_dedup\\b");
  private static final Pattern CONSTRAINT_NAME =
      Pattern.compile("\\bconsumer_dedup_(pk|status_ck|attempts_ck|created_idx)\\b");
  private static final Logger log = LoggerFactory.getLogger(DedupSchemaInitializer.class);

  private final DataSource dataSource;
  private final String tableName;
  private final @Nullable SqlDialect dialect;

  public DedupSchemaInitializer(DataSource dataSource, String tableName) {
    this(dataSource, tableName, null);
  }

  /**
   * @param dialect the dialect the application's store was built with, or null to tell it from the
   *     connection (a proxy that hides the database's name needs it set)
   */
  public DedupSchemaInitializer(
      DataSource dataSource, String tableName, @Nullable SqlDialect dialect) {
    this.dataSource = Objects.requireNonNull(dataSource, "dataSource");
    // Plain identifiers only, before the name reaches any DDL.
    this.tableName = JdbcDedupStore.checkTableName(tableName);
    this.dialect = dialect;
  }

  @Override
  public void afterPropertiesSet() throws SQLException {
    initialize();
  }

  /**
   * Creates the table if it is absent.
   *
   * @return whether it created it
   */
  public boolean initialize() throws SQLException {
    try (Connection connection = connection()) {
      String product = connection.getMetaData().getDatabaseProductName();
      SqlDialect dialect = this.dialect != null ? this.dialect : SqlDialect.forProduct(product);
      if (dialect == null) {
        // H2 in an application's tests, say: PostgreSQL's DDL would fail there on its first
        // statement with an error of the database's that names no property.
        throw new DedupConfigurationException(
            "consumer-dedup.initialize-schema=always supports PostgreSQL only; the DataSource is "
                + product
                + ". Set consumer-dedup.initialize-schema=never where the application runs on it"
                + " (its tests on an in-memory database, with a DedupStore bean of their own)",
            null,
            null);
      }
      if (dialect == SqlDialect.MYSQL) {
        // MySQL commits each DDL statement on its own and has no transaction-scoped advisory lock:
        // the table comes from the application's migrations there. A configuration error, so
        // that Spring Boot reports it as such rather than as a stack trace.
        throw new DedupConfigurationException(
            "consumer-dedup.initialize-schema=always supports PostgreSQL only; on MySQL or MariaDB"
                + " create the table "
                + tableName
                + " from "
                + SqlDialect.MYSQL.schemaResource()
                + " with your migrations (Flyway naming) and set initialize-schema=never",
            null,
            null);
      }
      // Behind a pooler in transaction mode, the store's own way: unnamed statements.
      return JdbcDedupStore.withStatementsAsTheStoreMakesThem(connection, this::createIfAbsent);
    }
  }

  /**
   * A connection of the DataSource. The driver's refusal of the URL names the whole URL, password
   * included, and the initializer asks before the store does: it is reported as the store reports
   * it, the password left out.
   */
  private Connection connection() throws SQLException {
    try {
      return dataSource.getConnection();
    } catch (SQLException | RuntimeException e) {
      DedupConfigurationException refused = SqlStates.noDriverAccepts(e);
      if (refused != null) {
        throw refused;
      }
      throw e;
    }
  }

  private boolean createIfAbsent(Connection connection) throws SQLException {
    boolean autoCommit = connection.getAutoCommit();
    connection.setAutoCommit(false);
    try {
      try (PreparedStatement lock =
          connection.prepareStatement("SELECT pg_advisory_xact_lock(hashtext(?))")) {
        lock.setString(1, "consumer-dedup schema " + tableName);
        lock.execute();
      }
      if (exists(connection)) {
        connection.commit();
        log.debug("Dedup table {} exists; schema initialization skipped", tableName);
        return false;
      }
      ScriptUtils.executeSqlScript(
          connection, new ByteArrayResource(ddl(tableName).getBytes(StandardCharsets.UTF_8)));
      connection.commit();
      log.info("Created dedup table {} from {}", tableName, SCRIPT);
      return true;
    } catch (SQLException | RuntimeException | Error e) {
      // An Error too: the finally's setAutoCommit(true) commits what is open, a table without its
      // index, which every later start would then take for a table created whole.
      connection.rollback();
      throw e;
    } finally {
      connection.setAutoCommit(autoCommit);
    }
  }

  private boolean exists(Connection connection) throws SQLException {
    try (PreparedStatement statement =
        connection.prepareStatement("SELECT to_regclass(?) IS NOT NULL")) {
      statement.setString(1, tableName);
      try (ResultSet row = statement.executeQuery()) {
        return row.next() && row.getBoolean(1);
      }
    }
  }

  /** The shipped DDL, with {@code tableName} in place of the script's table. */
  static String ddl(String tableName) {
    String script;
    try (InputStream in =
        DedupSchemaInitializer.class.getClassLoader().getResourceAsStream(SCRIPT)) {
      if (in == null) {
        throw new IllegalStateException(
            SCRIPT + " is not on the classpath (it ships in consumer-dedup-schema)");
      }
      script = new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new IllegalStateException("Could not read " + SCRIPT, e);
    }
    if (tableName.equals(SCRIPT_TABLE)) {
      return script;
    }
    String unqualified = tableName.substring(tableName.lastIndexOf('.') + 1);
    String renamed =
        CONSTRAINT_NAME.matcher(script).replaceAll(Matcher.quoteReplacement(unqualified) + "_$1");
    return TABLE_REFERENCE.matcher(renamed).replaceAll(Matcher.quoteReplacement(tableName));
  }
}
