package io.consumerdedup.bench;

import java.util.OptionalLong;

/**
 * One way of consuming the workload that the benchmark compares: a consumer loop and, usually, a
 * dedup step around the trivial business handler ({@link HandlerEffects}). To add one, implement
 * this interface in one small class and list it in {@link Comparison}.
 *
 * <p>For each run, the harness calls {@link #prepare} (not timed), then {@link #consume} with a
 * fresh consumer group; it counts the database's commits around the call.
 */
public interface Variant {

  /** A short id, such as {@code V1}. */
  String id();

  /** What it is, in a few words, for the report. */
  String title();

  /** How often the handler must run over the workload: the check of every run. */
  HandlerRuns expectedHandlerRuns();

  /** Creates the tables the variant needs, once per benchmark, before any run. */
  default void createTables(BenchDatabase database) throws Exception {}

  /** Brings the tables to the state each run of the variant starts from (not timed). */
  default void prepare(BenchDatabase database) throws Exception {}

  /**
   * Consumes every message of {@link RunContext#workload()} in the context's group, with a consumer
   * from {@link RunContext#newConsumer()} (which reports to the probe) and the context's pool, runs
   * {@link RunContext#effects()} for each record that is not a duplicate, and tells the probe when
   * each record is done. Returns once every record is done and the consumer is closed.
   */
  void consume(RunContext context) throws Exception;

  /**
   * How many keys of the workload the variant's store holds as done once a run has ended (its
   * consumer closed), read from the database; empty for a variant without a store. Each run is
   * checked to hold every distinct key once: a key the handler ran for but whose SUCCESS is not
   * durable would be applied again after a restart, and a run that skipped that write would be
   * measured as faster than it is.
   */
  default OptionalLong keysRecorded(BenchDatabase database) throws Exception {
    return OptionalLong.empty();
  }

  /** How often the handler must run over the workload. */
  enum HandlerRuns {
    /** For every message: no dedup. */
    EVERY_MESSAGE,
    /** Once for each distinct business key. */
    EACH_KEY_ONCE,
    /** Never: every message is a duplicate of a key already done. */
    NEVER;

    /** The number of handler runs over {@code workload}. */
    long over(Workload workload) {
      return switch (this) {
        case EVERY_MESSAGE -> workload.messages();
        case EACH_KEY_ONCE -> workload.distinctKeys();
        case NEVER -> 0;
      };
    }
  }
}
