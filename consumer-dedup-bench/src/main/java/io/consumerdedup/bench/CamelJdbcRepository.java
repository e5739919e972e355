package io.consumerdedup.bench;

import java.util.OptionalLong;
import org.apache.camel.processor.idempotent.jdbc.JdbcMessageIdRepository;

/**
 * V3: Apache Camel's {@link JdbcMessageIdRepository} (camel-sql) as the dedup step of the plain
 * poll loop, called as Camel's idempotent consumer calls it (eager, the default): {@code add(key)}
 * before the handler (false: a duplicate, skipped), {@code confirm(key)} after it, {@code
 * remove(key)} if it throws. Its table is the one Camel creates, with Camel's own DDL.
 */
final class CamelJdbcRepository implements Variant {
  private static final String PROCESSOR_NAME = "bench";

  @Override
  public String id() {
    return "V3";
  }

  @Override
  public String title() {
    return "Camel JdbcMessageIdRepository";
  }

  @Override
  public HandlerRuns expectedHandlerRuns() {
    return HandlerRuns.EACH_KEY_ONCE;
  }

  @Override
  public OptionalLong keysRecorded(BenchDatabase database) throws Exception {
    return OptionalLong.of(
        database.queryForLong(
            "SELECT count(*) FROM camel_messageprocessed WHERE processorName = ?", PROCESSOR_NAME));
  }

  @Override
  public void createTables(BenchDatabase database) throws Exception {
    // The statement Camel runs when it finds no table (createTableIfNotExists, on by default).
    database.execute(new JdbcMessageIdRepository().getCreateString());
  }

  @Override
  public void prepare(BenchDatabase database) throws Exception {
    database.execute("TRUNCATE camel_messageprocessed");
  }

  @Override
  public void consume(RunContext context) throws Exception {
    JdbcMessageIdRepository repository =
        new JdbcMessageIdRepository(context.dataSource(), PROCESSOR_NAME);
    repository.setCreateTableIfNotExists(false);
    repository.start();
    try {
      PlainPollLoop.run(
          context,
          record -> {
            String key = Workload.orderNo(record);
            if (!repository.add(key)) {
              return false;
            }
            try {
              context.effects().apply(record);
            } catch (RuntimeException e) {
              repository.remove(key);
              throw e;
            }
            repository.confirm(key);
            return true;
          });
    } finally {
      repository.stop();
    }
  }
}
