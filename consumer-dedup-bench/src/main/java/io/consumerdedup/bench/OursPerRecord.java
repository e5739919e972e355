package io.consumerdedup.bench;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.kafka.DedupPollLoop;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.KeyExtractors;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * consumer-dedup, one record at a time, set up as the README's quick start does: a {@link
 * JdbcDedupStore} on a HikariCP pool, an {@link IdempotentExecutor} with the defaults, an {@link
 * IdempotentRecordHandler} keyed by the {@code order-no} header, in a {@link DedupPollLoop}. The
 * loop gets a consumer the harness made ({@code DedupPollLoop.builder(consumer, ...)}) so that its
 * polls and commits are measured; its settings are those of the quick start.
 *
 * <p>Three starting states: V1 starts from an empty table (every key new), V6 from the table V1
 * left (every message a duplicate), and the table-size sweep from a table it preloaded.
 */
final class OursPerRecord implements Variant {
  private final String id;
  private final String title;
  private final TableState startsFrom;

  /** What the dedup table holds when a run starts. */
  private enum TableState {
    EMPTY,
    THE_WORKLOADS_KEYS,
    AS_PREPARED_BY_THE_CALLER
  }

  private OursPerRecord(String id, String title, TableState startsFrom) {
    this.id = id;
    this.title = title;
    this.startsFrom = startsFrom;
  }

  /** V1: every key new to the table. */
  static OursPerRecord newKeys() {
    return new OursPerRecord("V1", "ours, per record", TableState.EMPTY);
  }

  /** V6: the same messages again; run it right after V1, on the table V1 filled. */
  static OursPerRecord duplicatesOnly() {
    return new OursPerRecord(
        "V6", "ours, per record, duplicates only", TableState.THE_WORKLOADS_KEYS);
  }

  /** V1 on whatever the caller put in the table (and none of the workload's keys). */
  static OursPerRecord onPreparedTable() {
    return new OursPerRecord(
        "V1", "ours, per record, preloaded table", TableState.AS_PREPARED_BY_THE_CALLER);
  }

  @Override
  public String id() {
    return id;
  }

  @Override
  public String title() {
    return title;
  }

  @Override
  public HandlerRuns expectedHandlerRuns() {
    return startsFrom == TableState.THE_WORKLOADS_KEYS
        ? HandlerRuns.NEVER
        : HandlerRuns.EACH_KEY_ONCE;
  }

  @Override
  public void prepare(BenchDatabase database) throws Exception {
    switch (startsFrom) {
      case EMPTY -> DedupTable.truncate(database);
      case THE_WORKLOADS_KEYS -> {
        long rows = DedupTable.rows(database);
        if (rows == 0) {
          throw new IllegalStateException(id + " runs right after V1, on the table V1 filled");
        }
      }
      case AS_PREPARED_BY_THE_CALLER -> {}
    }
  }

  @Override
  public void consume(RunContext context) throws Exception {
    IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(context.dataSource()).build()).build();
    IdempotentRecordHandler<String, String> handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(DedupTable.BIZ_TYPE)
            .key(KeyExtractors.header(Workload.ORDER_NO_HEADER))
            .groupId(context.groupId())
            .handler(context.effects()::apply)
            .build();
    DedupPollLoop<String, String> loop =
        DedupPollLoop.builder(
                context.newConsumer(),
                List.of(context.workload().topic()),
                new ProbedProcessor(handler, context.probe()))
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
