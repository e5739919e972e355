package io.consumerdedup.spring;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupRecord;
import io.micrometer.observation.Observation;
import io.micrometer.observation.ObservationRegistry;

/**
 * Adds the dedup outcome to the observation the listener runs in (spring-kafka's listener
 * observation, with {@code spring.kafka.listener.observation-enabled=true}), as the low-cardinality
 * key {@value #KEY}: {@code processed} (the listener ran), {@code duplicate}, {@code in_progress},
 * {@code conflict} or {@code key_missing}, so traces show why a record did or did not run the
 * listener. The engine calls these methods on the listener's thread, inside the observation's
 * scope; without a current observation they do nothing.
 */
public final class ObservationOutcomeTagger implements DedupListener {
  /** The key of the tag. */
  public static final String KEY = "consumer.dedup.outcome";

  private final ObservationRegistry registry;

  public ObservationOutcomeTagger(ObservationRegistry registry) {
    this.registry = registry;
  }

  @Override
  public void claimed(DedupKey key, int attempt) {
    tag("processed");
  }

  @Override
  public void duplicate(DedupKey key, DedupRecord existing) {
    tag("duplicate");
  }

  @Override
  public void inProgress(DedupKey key, DedupRecord existing) {
    tag("in_progress");
  }

  @Override
  public void conflict(DedupKey key, DedupRecord existing) {
    tag("conflict");
  }

  @Override
  public void keyMissing(String bizType, String source) {
    tag("key_missing");
  }

  /**
   * Tags the current observation with {@code outcome}. The interceptor calls it for a record whose
   * key was claimed with its poll's: the engine told those outcomes during the poll's first record,
   * in that record's observation.
   */
  void tag(String outcome) {
    Observation current = registry.getCurrentObservation();
    if (current != null) {
      current.lowCardinalityKeyValue(KEY, outcome);
    }
  }
}
