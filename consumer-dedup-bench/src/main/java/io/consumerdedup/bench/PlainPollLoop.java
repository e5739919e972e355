package io.consumerdedup.bench;

import io.consumerdedup.kafka.DedupPollLoop;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;

/**
 * The poll loop of a plain kafka-clients consumer, as users write it: poll, run a step for each
 * record, {@code commitSync} after each poll that returned records. The same poll timeout as {@link
 * DedupPollLoop}'s default. The variants that compare a peer's dedup step run it here.
 */
final class PlainPollLoop {

  /** What the loop does with one record. */
  @FunctionalInterface
  interface RecordStep {
    /**
     * Handles the record.
     *
     * @return true if the handler ran, false if the record was skipped as a duplicate
     */
    boolean process(ConsumerRecord<String, String> record) throws Exception;
  }

  private PlainPollLoop() {}

  /** Consumes the run's workload through {@code step}, then closes the consumer. */
  static void run(RunContext context, RecordStep step) throws Exception {
    Probe probe = context.probe();
    try (MeasuredConsumer consumer = context.newConsumer()) {
      consumer.subscribe(List.of(context.workload().topic()));
      while (!probe.allDone()) {
        context.checkTime();
        ConsumerRecords<String, String> records = consumer.poll(DedupPollLoop.DEFAULT_POLL_TIMEOUT);
        for (ConsumerRecord<String, String> record : records) {
          probe.recordDone(step.process(record));
        }
        if (!records.isEmpty()) {
          consumer.commitSync();
        }
      }
    }
  }
}
