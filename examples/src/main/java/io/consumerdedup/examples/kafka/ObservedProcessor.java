package io.consumerdedup.examples.kafka;

import static io.consumerdedup.examples.kafka.RecordText.rootMessage;
import static io.consumerdedup.examples.kafka.RecordText.where;

import io.consumerdedup.core.DedupInProgressException;
import io.consumerdedup.core.Disposition;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.kafka.RecordProcessor;
import java.util.HashSet;
import java.util.OptionalInt;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * The library's processor, unchanged but counted for the report and narrated in progress lines:
 * every delivery, every delivery of a record this consumer was given before, every duplicate, and
 * what the loop is told when a record cannot be done. The loop decides what happens next.
 */
final class ObservedProcessor implements RecordProcessor<String, String> {
  private final ConsumerSetup setup;
  private final RecordProcessor<String, String> processor;
  // Touched by the loop thread only.
  private final Set<String> seen = new HashSet<>();
  private final Set<String> inProgressAnnounced = new HashSet<>();

  ObservedProcessor(ConsumerSetup setup, RecordProcessor<String, String> processor) {
    this.setup = setup;
    this.processor = processor;
  }

  @Override
  public Outcome process(ConsumerRecord<String, String> record) {
    setup.stats().delivered();
    String coordinates = record.partition() + "@" + record.offset();
    if (!seen.add(coordinates)) {
      setup.stats().retried();
    }
    Outcome outcome;
    try {
      outcome = processor.process(record);
    } catch (RuntimeException e) {
      report(record, coordinates, e);
      throw e;
    }
    if (outcome == Outcome.DUPLICATE) {
      setup.stats().duplicateSkipped();
      setup.step(where(record) + " is a duplicate, skipped");
    } else {
      setup.step(where(record) + " processed");
    }
    return outcome;
  }

  private void report(ConsumerRecord<String, String> record, String coordinates, Exception e) {
    if (e instanceof DedupInProgressException inProgress) {
      if (inProgressAnnounced.add(coordinates)) {
        setup.step(
            where(record)
                + " is in progress under "
                + inProgress.holder()
                + "'s lease; the loop holds it and tries again until that holder finishes or its"
                + " lease runs out");
      }
      return;
    }
    String what =
        switch (Disposition.of(e)) {
          case RETRY_LATER -> "cannot be handled yet; the loop holds it and tries again";
          case DEAD_LETTER -> "cannot be handled; the loop dead-letters it";
          case HANDLER_FAILED -> "failed; the loop retries it, up to its attempt limit";
        };
    setup.step(where(record) + " " + what + " (" + rootMessage(e) + ")");
  }

  @Override
  public OptionalInt attempts(ConsumerRecord<String, String> record) {
    return processor.attempts(record);
  }
}
