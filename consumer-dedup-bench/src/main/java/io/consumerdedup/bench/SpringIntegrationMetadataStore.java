package io.consumerdedup.bench;

import java.util.OptionalLong;
import javax.sql.DataSource;
import org.springframework.core.io.ClassPathResource;
import org.springframework.integration.jdbc.metadata.JdbcMetadataStore;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.jdbc.datasource.init.ResourceDatabasePopulator;
import org.springframework.transaction.support.TransactionTemplate;

/**
 * V4: Spring Integration's {@link JdbcMetadataStore#putIfAbsent} as the dedup step of the plain
 * poll loop, in a transaction with the handler: a key already present is a duplicate, skipped. The
 * value stored is the time, as Spring Integration's {@code MetadataStoreSelector} stores by
 * default. Its tables come from the PostgreSQL schema file it ships.
 */
final class SpringIntegrationMetadataStore implements Variant {
  private static final String SCHEMA = "org/springframework/integration/jdbc/schema-postgresql.sql";

  @Override
  public String id() {
    return "V4";
  }

  @Override
  public String title() {
    return "Spring Integration JdbcMetadataStore";
  }

  @Override
  public HandlerRuns expectedHandlerRuns() {
    return HandlerRuns.EACH_KEY_ONCE;
  }

  @Override
  public OptionalLong keysRecorded(BenchDatabase database) throws Exception {
    return OptionalLong.of(database.queryForLong("SELECT count(*) FROM int_metadata_store"));
  }

  @Override
  public void createTables(BenchDatabase database) {
    new ResourceDatabasePopulator(new ClassPathResource(SCHEMA))
        .execute(database.unpooledDataSource());
  }

  @Override
  public void prepare(BenchDatabase database) throws Exception {
    database.execute("TRUNCATE int_metadata_store");
  }

  @Override
  public void consume(RunContext context) throws Exception {
    DataSource dataSource = context.dataSource();
    JdbcMetadataStore store = new JdbcMetadataStore(dataSource);
    store.afterPropertiesSet();
    store.start();
    TransactionTemplate transaction =
        new TransactionTemplate(new DataSourceTransactionManager(dataSource));
    try {
      PlainPollLoop.run(
          context,
          record ->
              Boolean.TRUE.equals(
                  transaction.execute(
                      status -> {
                        String now = Long.toString(System.currentTimeMillis());
                        if (store.putIfAbsent(Workload.orderNo(record), now) != null) {
                          return false;
                        }
                        context.effects().apply(record);
                        return true;
                      })));
    } finally {
      store.stop();
    }
  }
}
