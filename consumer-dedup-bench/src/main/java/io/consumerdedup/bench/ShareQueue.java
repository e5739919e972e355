package io.consumerdedup.bench;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.kafka.DedupShareLoop;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.KeyExtractors;
import io.consumerdedup.kafka.RecordProcessor;
import java.time.Duration;
import java.util.List;
import java.util.OptionalInt;
import java.util.OptionalLong;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;

/**
 * The workload consumed from a share group (KIP-932), by one share consumer.
 *
 * <p>V9: a plain {@link KafkaShareConsumer} in its default implicit acknowledgement mode (each poll
 * accepts the records of the previous one); the handler runs for every message. V10: the same group
 * consumed through consumer-dedup's {@link DedupShareLoop} with an {@link IdempotentRecordHandler}
 * at its defaults (one claim statement per poll, SUCCESS marks grouped, each record accepted once
 * its SUCCESS is written).
 */
final class ShareQueue implements Variant {
  private final boolean idempotent;

  private ShareQueue(boolean idempotent) {
    this.idempotent = idempotent;
  }

  /** V9: a plain share consumer, no dedup. */
  static ShareQueue plain() {
    return new ShareQueue(false);
  }

  /** V10: {@link DedupShareLoop}, every key new to the table. */
  static ShareQueue idempotent() {
    return new ShareQueue(true);
  }

  @Override
  public String id() {
    return idempotent ? "V10" : "V9";
  }

  @Override
  public String title() {
    return idempotent ? "ours, share group (DedupShareLoop)" : "plain share consumer, no dedup";
  }

  @Override
  public HandlerRuns expectedHandlerRuns() {
    return idempotent ? HandlerRuns.EACH_KEY_ONCE : HandlerRuns.EVERY_MESSAGE;
  }

  @Override
  public OptionalLong keysRecorded(BenchDatabase database) throws Exception {
    return idempotent
        ? OptionalLong.of(DedupTable.workloadKeysDone(database))
        : OptionalLong.empty();
  }

  @Override
  public void prepare(BenchDatabase database) throws Exception {
    if (idempotent) {
      DedupTable.truncate(database);
    }
  }

  @Override
  public void consume(RunContext context) throws Exception {
    if (idempotent) {
      consumeIdempotent(context);
    } else {
      consumePlain(context);
    }
  }

  private static void consumePlain(RunContext context) throws Exception {
    try (KafkaShareConsumer<String, String> consumer =
        new KafkaShareConsumer<>(context.shareConsumerConfig())) {
      consumer.subscribe(List.of(context.workload().topic()));
      while (!context.probe().allDone()) {
        context.checkTime();
        ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(100));
        if (records.isEmpty()) {
          continue;
        }
        context.probe().pollReturned();
        for (ConsumerRecord<String, String> record : records) {
          context.effects().apply(record);
          context.probe().recordDone(true);
        }
      }
      consumer.commitSync(); // the last poll's records, accepted
    }
  }

  private static void consumeIdempotent(RunContext context) throws Exception {
    IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(context.dataSource()).build()).build();
    IdempotentRecordHandler<String, String> handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(DedupTable.BIZ_TYPE)
            .key(KeyExtractors.header(Workload.ORDER_NO_HEADER))
            .groupId(context.groupId())
            .handler(context.effects()::apply)
            .build();
    DedupShareLoop<String, String> loop =
        DedupShareLoop.builder(
                context.shareConsumerConfig(),
                List.of(context.workload().topic()),
                new PollProbe(new ProbedProcessor(handler, context.probe()), context))
            .deadLetterHandler((record, reason) -> context.probe().deadLettered(reason))
            .build();
    ExecutorService loopThread = Executors.newSingleThreadExecutor();
    try {
      Future<?> running = loopThread.submit(loop);
      try {
        context.awaitAllDone();
      } finally {
        loop.close();
      }
      running.get();
    } finally {
      loopThread.shutdown();
      executor.close();
    }
  }

  /**
   * Tells the probe when a poll's records reach the processor (the loop's consumer is its own, so
   * its polls cannot be measured), then is the processor it wraps.
   */
  private record PollProbe(RecordProcessor<String, String> processor, RunContext context)
      implements RecordProcessor<String, String> {
    @Override
    public Outcome process(ConsumerRecord<String, String> record) {
      return processor.process(record);
    }

    @Override
    public OptionalInt attempts(ConsumerRecord<String, String> record) {
      return processor.attempts(record);
    }

    @Override
    public void prepare(List<ConsumerRecord<String, String>> records) {
      context.probe().pollReturned();
      processor.prepare(records);
    }

    @Override
    public List<ConsumerRecord<String, String>> settle() {
      return processor.settle();
    }
  }
}
