package io.consumerdedup.jdbc;

import java.util.Locale;
import org.jspecify.annotations.Nullable;

/**
 * The databases {@link JdbcDedupStore} speaks to. The store detects the dialect from the
 * connection's metadata; {@link JdbcDedupStore.Builder#dialect(SqlDialect)} sets it instead.
 */
public enum SqlDialect {
  /** PostgreSQL 13+. */
  POSTGRESQL("db/consumer-dedup/postgresql/V1__consumer_dedup.sql"),

  /** MySQL 8.0+ and MariaDB 10.6+ (InnoDB), through MySQL Connector/J or MariaDB Connector/J. */
  MYSQL("db/consumer-dedup/mysql/V1__consumer_dedup.sql");

  private final String schemaResource;

  SqlDialect(String schemaResource) {
    this.schemaResource = schemaResource;
  }

  /** The schema file that creates the dedup table, on the classpath (Flyway naming). */
  public String schemaResource() {
    return schemaResource;
  }

  /**
   * The dialect of a database product as {@link java.sql.DatabaseMetaData#getDatabaseProductName()}
   * names it ({@code PostgreSQL}, {@code MySQL}, {@code MariaDB}); null for any other.
   */
  public static @Nullable SqlDialect forProduct(@Nullable String productName) {
    if (productName == null) {
      return null;
    }
    String product = productName.toLowerCase(Locale.ROOT);
    if (product.equals("postgresql")) {
      return POSTGRESQL;
    }
    if (product.equals("mysql") || product.equals("mariadb")) {
      return MYSQL;
    }
    return null;
  }
}
