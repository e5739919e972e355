package io.consumerdedup.bench;

import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.TransactionBoundDataSource;
import io.consumerdedup.kafka.DedupPollLoop;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.JdbcTransactionalProcessor;
import io.consumerdedup.kafka.KeyExtractors;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.util.List;
import java.util.OptionalLong;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * V5: consumer-dedup in mode TRANSACTIONAL, as a plain consumer runs it ({@link
 * JdbcTransactionalProcessor#of}): each poll's claims and the handler's business inserts (one row
 * per order in {@code bench_orders}) in one transaction, one commit per poll.
 */
final class OursTransactional implements Variant {

  @Override
  public String id() {
    return "V5";
  }

  @Override
  public String title() {
    return "ours TRANSACTIONAL + insert, batched";
  }

  @Override
  public HandlerRuns expectedHandlerRuns() {
    return HandlerRuns.EACH_KEY_ONCE;
  }

  /** Keys whose SUCCESS row and business row were committed, once each. */
  @Override
  public OptionalLong keysRecorded(BenchDatabase database) throws Exception {
    return OptionalLong.of(
        database.queryForLong(
            "SELECT count(*) FROM "
                + DedupTable.NAME
                + " d JOIN bench_orders o ON o.order_no = d.biz_key"
                + " WHERE d.biz_type = ? AND d.status = 'SUCCESS'",
            DedupTable.BIZ_TYPE));
  }

  @Override
  public void createTables(BenchDatabase database) throws Exception {
    database.execute("CREATE TABLE bench_orders (order_no text NOT NULL, payload text NOT NULL)");
  }

  @Override
  public void prepare(BenchDatabase database) throws Exception {
    DedupTable.truncate(database);
    database.execute("TRUNCATE bench_orders");
  }

  @Override
  public void consume(RunContext context) throws Exception {
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(context.dataSource());
    IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(transactions).build())
            .mode(DedupMode.TRANSACTIONAL)
            .build();
    IdempotentRecordHandler<String, String> handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(DedupTable.BIZ_TYPE)
            .key(KeyExtractors.header(Workload.ORDER_NO_HEADER))
            .groupId(context.groupId())
            .handler(
                record -> {
                  try (Connection connection = transactions.getConnection();
                      PreparedStatement insert =
                          connection.prepareStatement(
                              "INSERT INTO bench_orders (order_no, payload) VALUES (?, ?)")) {
                    insert.setString(1, Workload.orderNo(record));
                    insert.setString(2, record.value());
                    insert.executeUpdate();
                  }
                  context.effects().apply(record);
                })
            .build();
    DedupPollLoop<String, String> loop =
        DedupPollLoop.builder(
                context.newConsumer(),
                List.of(context.workload().topic()),
                new ProbedProcessor(
                    JdbcTransactionalProcessor.of(transactions, handler), context.probe()))
            .deadLetterHandler((record, reason) -> context.probe().deadLettered(reason))
            .build();
    ExecutorService pollThread = Executors.newSingleThreadExecutor();
    try {
      Future<?> polling = pollThread.submit(loop);
      try {
        context.awaitAllDone();
      } finally {
        loop.close();
      }
      polling.get();
    } finally {
      pollThread.shutdown();
      executor.close();
    }
  }
}
