package io.consumerdedup.bench;

import io.consumerdedup.core.Outcome;
import io.consumerdedup.kafka.RecordProcessor;
import java.util.List;
import java.util.OptionalInt;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * A {@link RecordProcessor} that tells the probe when each record is done, and otherwise is the one
 * it wraps (its attempt count included), so that {@link io.consumerdedup.kafka.DedupPollLoop}
 * treats it exactly as the wrapped processor.
 */
final class ProbedProcessor implements RecordProcessor<String, String> {
  private final RecordProcessor<String, String> processor;
  private final Probe probe;

  ProbedProcessor(RecordProcessor<String, String> processor, Probe probe) {
    this.processor = processor;
    this.probe = probe;
  }

  @Override
  public Outcome process(ConsumerRecord<String, String> record) {
    Outcome outcome = processor.process(record);
    probe.recordDone(outcome == Outcome.PROCESSED);
    return outcome;
  }

  @Override
  public OptionalInt attempts(ConsumerRecord<String, String> record) {
    return processor.attempts(record);
  }

  @Override
  public void prepare(List<ConsumerRecord<String, String>> records) {
    processor.prepare(records);
  }

  @Override
  public List<ConsumerRecord<String, String>> settle() {
    return processor.settle();
  }
}
