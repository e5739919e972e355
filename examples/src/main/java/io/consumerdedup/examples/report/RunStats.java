package io.consumerdedup.examples.report;

import java.util.concurrent.atomic.AtomicInteger;

/**
 * What one run's consumers saw, counted as it happens (thread-safe: a run may have several
 * consumers).
 */
public final class RunStats {
  private final AtomicInteger delivered = new AtomicInteger();
  private final AtomicInteger handlerRuns = new AtomicInteger();
  private final AtomicInteger duplicatesSkipped = new AtomicInteger();
  private final AtomicInteger retries = new AtomicInteger();
  private final AtomicInteger deadLettered = new AtomicInteger();

  /** A consumer received a record (a redelivery counts again). */
  public void delivered() {
    delivered.incrementAndGet();
  }

  /** The application's handler started. */
  public void handlerRan() {
    handlerRuns.incrementAndGet();
  }

  public void duplicateSkipped() {
    duplicatesSkipped.incrementAndGet();
  }

  /** A record is to be delivered again: its handler failed, or another consumer holds its key. */
  public void retried() {
    retries.incrementAndGet();
  }

  public void deadLettered() {
    deadLettered.incrementAndGet();
  }

  /** Adds counts reported by a consumer in another process. */
  public void add(int delivered, int handlerRuns, int duplicatesSkipped) {
    this.delivered.addAndGet(delivered);
    this.handlerRuns.addAndGet(handlerRuns);
    this.duplicatesSkipped.addAndGet(duplicatesSkipped);
  }

  public int deliveredCount() {
    return delivered.get();
  }

  public int handlerRunCount() {
    return handlerRuns.get();
  }

  public int duplicatesSkippedCount() {
    return duplicatesSkipped.get();
  }

  public int retryCount() {
    return retries.get();
  }

  public int deadLetteredCount() {
    return deadLettered.get();
  }
}
