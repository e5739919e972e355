package io.consumerdedup.jdbc;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.jdbc.internal.Dialect;
import io.consumerdedup.jdbc.internal.MySqlDialect;
import io.consumerdedup.jdbc.internal.PostgresDialect;
import io.consumerdedup.jdbc.internal.StoreCalls;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.Optional;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;

/**
 * The dialect of a store's database: as the builder set it, else from the product name of the first
 * connection; {@link StoreCalls} asks once and keeps the answer for every call of the store, its
 * admin and its janitor.
 */
final class AutodetectDialect implements StoreCalls.DialectChoice {
  private final String table;
  private final Logger log;
  private volatile @Nullable SqlDialect chosen;

  AutodetectDialect(@Nullable SqlDialect configured, String table, Logger log) {
    this.chosen = configured;
    this.table = table;
    this.log = log;
  }

  @Override
  public Dialect choose(Connection connection, StoreCalls calls) throws SQLException {
    String product = connection.getMetaData().getDatabaseProductName();
    SqlDialect dialect = chosen;
    if (dialect == null) {
      dialect = SqlDialect.forProduct(product);
      if (dialect == null) {
        // Not an outage: no retry can make the store speak to this database, so every record
        // would wait for good. Said as the configuration error it is, which stops a Spring
        // application at start-up (its table check) rather than holding its records.
        throw new DedupConfigurationException(
            "JdbcDedupStore supports PostgreSQL, MySQL and MariaDB; the DataSource is "
                + product
                + ". Point it at one of those; in tests, give the application a DedupStore of its"
                + " own (an InMemoryDedupStore of consumer-dedup-test), or set"
                + " consumer-dedup.enabled=false where no listener consumes",
            null,
            null);
      }
      chosen = dialect;
    }
    return switch (dialect) {
      case POSTGRESQL -> new PostgresDialect(calls, table, dialect.schemaResource(), log);
      case MYSQL -> new MySqlDialect(calls, table, dialect.schemaResource(), log);
    };
  }

  /** The dialect, once the first connection has told it (or the builder set it). */
  Optional<SqlDialect> chosen() {
    return Optional.ofNullable(chosen);
  }
}
