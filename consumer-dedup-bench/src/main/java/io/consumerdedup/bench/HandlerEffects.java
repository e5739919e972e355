package io.consumerdedup.bench;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.LongAdder;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * The business handler of every variant: trivial, so that the benchmark measures what surrounds it,
 * and counting what it applied, so that a run can be checked (each distinct key once, or every
 * message for the consumer without dedup).
 */
public final class HandlerEffects {
  private final LongAdder runs = new LongAdder();
  private final Set<String> appliedKeys = ConcurrentHashMap.newKeySet();

  /** Applies the record: counts one run of the handler for its business key. */
  public void apply(ConsumerRecord<String, String> record) {
    runs.increment();
    appliedKeys.add(Workload.orderNo(record));
  }

  /** How many times the handler ran. */
  public long runs() {
    return runs.sum();
  }

  /** How many distinct business keys it applied. */
  public int distinctKeys() {
    return appliedKeys.size();
  }
}
