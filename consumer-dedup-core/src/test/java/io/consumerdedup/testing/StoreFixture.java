package io.consumerdedup.testing;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.AfterEachCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * What tests over a dedup table share, registered as a static {@code @RegisterExtension}: per test
 * class a schema of its own on PostgreSQL with a store over it; per test the executors it made,
 * closed after it.
 */
public class StoreFixture implements BeforeAllCallback, AfterAllCallback, AfterEachCallback {
  private final String schemaPrefix;
  private final int poolSize;
  private String schema;
  private HikariDataSource dataSource;
  private JdbcDedupStore store;
  private final List<IdempotentExecutor> executors = new CopyOnWriteArrayList<>();

  public StoreFixture(String schemaPrefix, int poolSize) {
    this.schemaPrefix = schemaPrefix;
    this.poolSize = poolSize;
  }

  @Override
  public void beforeAll(ExtensionContext context) {
    schema = TestDatabase.newSchema(schemaPrefix);
    dataSource = TestDatabase.dataSource(schema, poolSize);
    store = JdbcDedupStore.builder(dataSource).build();
  }

  @Override
  public void afterAll(ExtensionContext context) {
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  @Override
  public void afterEach(ExtensionContext context) {
    executors.forEach(IdempotentExecutor::close);
    executors.clear();
  }

  /** This test class's schema, holding the dedup table. */
  public String schema() {
    return schema;
  }

  public HikariDataSource dataSource() {
    return dataSource;
  }

  public JdbcDedupStore store() {
    return store;
  }

  /** Builds the executor, closed after the test. */
  public IdempotentExecutor executor(IdempotentExecutor.Builder builder) {
    IdempotentExecutor executor = builder.build();
    executors.add(executor);
    return executor;
  }
}
