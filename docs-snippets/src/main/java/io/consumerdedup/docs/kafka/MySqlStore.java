package io.consumerdedup.docs.kafka;

import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.SqlDialect;
import javax.sql.DataSource;

/** The store on MySQL or MariaDB behind a proxy that hides the product (docs/mysql.md). */
final class MySqlStore {
  private MySqlStore() {}

  static JdbcDedupStore behindAProxy(DataSource dataSource) {
    // tag::dialect[]
    JdbcDedupStore store = JdbcDedupStore.builder(dataSource).dialect(SqlDialect.MYSQL).build();
    // end::dialect[]
    return store;
  }
}
