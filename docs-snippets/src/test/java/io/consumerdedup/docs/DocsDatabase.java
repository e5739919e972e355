package io.consumerdedup.docs;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.testing.TestDatabase;

/** A pool on a fresh schema with the dedup table; closing it drops the schema. */
public final class DocsDatabase extends HikariDataSource {
  private final String schema;

  private DocsDatabase(HikariConfig config, String schema) {
    super(config);
    this.schema = schema;
  }

  public static DocsDatabase create(String prefix) {
    String schema = TestDatabase.newSchema(prefix);
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(TestDatabase.url(schema));
    config.setMaximumPoolSize(6);
    config.setPoolName("docs-" + schema);
    return new DocsDatabase(config, schema);
  }

  @Override
  public void close() {
    super.close();
    TestDatabase.dropSchema(schema);
  }
}
