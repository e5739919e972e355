package io.consumerdedup.bench;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.kafka.DedupPollLoop;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.KeyExtractors;
import java.util.List;
import java.util.OptionalLong;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * consumer-dedup, set up as the README's quick start does: a {@link JdbcDedupStore} on a HikariCP
 * pool, an {@link IdempotentExecutor} with the defaults, an {@link IdempotentRecordHandler} keyed
 * by the {@code order-no} header, in a {@link DedupPollLoop}. The loop gets a consumer the harness
 * made ({@code DedupPollLoop.builder(consumer, ...)}) so that its polls and commits are measured;
 * its settings are those of the quick start.
 *
 * <p>Per record ({@code claimsPerPoll(false)}): one claim and one synchronous SUCCESS per record.
 * Batched (the default): one claim statement per poll, SUCCESS marks group-committed by the
 * executor's writer thread, offsets committed behind them.
 *
 * <p>Three starting states: V1 starts from an empty table (every key new), V6 from the table V1
 * left (every message a duplicate), and the table-size sweep from a table it preloaded.
 */
final class OursLoop implements Variant {
  private final String id;
  private final String title;
  private final TableState startsFrom;
  private final boolean claimsPerPoll;

  /** What the dedup table holds when a run starts. */
  private enum TableState {
    EMPTY,
    THE_WORKLOADS_KEYS,
    AS_PREPARED_BY_THE_CALLER
  }

  private OursLoop(String id, String title, TableState startsFrom, boolean claimsPerPoll) {
    this.id = id;
    this.title = title;
    this.startsFrom = startsFrom;
    this.claimsPerPoll = claimsPerPoll;
  }

  /** V1: every key new to the table, one record at a time. */
  static OursLoop newKeys() {
    return new OursLoop("V1", "ours, per record", TableState.EMPTY, false);
  }

  /** V2: every key new to the table, claims per poll (the default). */
  static OursLoop batched() {
    return new OursLoop("V2", "ours, batched", TableState.EMPTY, true);
  }

  /** V6: the same messages again, per record; run it right after V1, on the table V1 filled. */
  static OursLoop duplicatesOnly() {
    return new OursLoop(
        "V6", "ours, per record, duplicates only", TableState.THE_WORKLOADS_KEYS, false);
  }

  /** V2 on whatever the caller put in the table (and none of the workload's keys). */
  static OursLoop onPreparedTable() {
    return new OursLoop(
        "V2", "ours, batched, preloaded table", TableState.AS_PREPARED_BY_THE_CALLER, true);
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
  public OptionalLong keysRecorded(BenchDatabase database) throws Exception {
    return OptionalLong.of(DedupTable.workloadKeysDone(database));
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
            .claimsPerPoll(claimsPerPoll)
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
