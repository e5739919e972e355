package io.consumerdedup.core;

import java.time.Duration;
import java.util.List;
import java.util.function.Consumer;
import org.slf4j.LoggerFactory;

/**
 * Events of the engine, for metrics and logs. Every method has an empty default; implementations
 * must be fast and must not throw (an exception is logged and ignored).
 */
public interface DedupListener {

  /** A listener that does nothing. */
  DedupListener NOOP = new DedupListener() {};

  /** A claim round trip took {@code elapsed}, whatever its answer. */
  default void claimTimed(DedupKey key, Duration elapsed) {}

  /** The caller claimed the key and is about to run the handler. */
  default void claimed(DedupKey key, int attempt) {}

  /** The key had already succeeded; the handler was skipped. */
  default void duplicate(DedupKey key, DedupRecord existing) {}

  /** Another consumer holds a live lease on the key. */
  default void inProgress(DedupKey key, DedupRecord existing) {}

  /** The delivery's payload fingerprint differs from the stored one. */
  default void conflict(DedupKey key, DedupRecord existing) {}

  /** The handler succeeded and SUCCESS was recorded. */
  default void completed(DedupKey key, int attempt, Duration handlerTime) {}

  /** The handler threw; FAILED was recorded (unless the lease was lost or the store was down). */
  default void failed(DedupKey key, int attempt, Throwable error) {}

  /**
   * The holder's lease was taken over by another consumer: its renewal, SUCCESS or FAILED write was
   * refused so as not to overwrite the new holder. Told once per attempt, by whichever of them
   * found the loss first.
   */
  default void leaseLost(DedupKey key, int attempt) {}

  /**
   * The store failed while claiming {@code key} or writing its outcome ({@code error} says how);
   * the delivery is retried later. Fired once per failed store call, after the store's own retries.
   */
  default void storeFailed(DedupKey key, DedupStoreException error) {}

  /** A delivery had no usable key (from the Kafka adapters). */
  default void keyMissing(String bizType, String source) {}

  /** The retention purge deleted {@code count} records. */
  default void purged(int count) {}

  /**
   * The retention purge measured its backlog: {@code expiredRows} expired records not purged yet
   * (counted among the oldest, so a floor when large), the oldest of them expired {@code
   * oldestExpiredAge} ago (zero when none is).
   */
  default void purgeBacklog(long expiredRows, Duration oldestExpiredAge) {}

  /**
   * The retention purge could not measure its backlog ({@code error} says why): the backlog is
   * unknown until a later run measures it. The run purges all the same.
   */
  default void purgeBacklogUnknown(RuntimeException error) {}

  /**
   * A listener that passes every event to each of {@code listeners}, in order; one that throws is
   * logged and skipped, the others still hear of the event.
   */
  static DedupListener composite(List<DedupListener> listeners) {
    List<DedupListener> all = List.copyOf(listeners);
    // Written here rather than as a class of the internal package, which this public type must not
    // import: that class would import this one back.
    return new DedupListener() {
      private void each(String event, Consumer<DedupListener> call) {
        for (DedupListener listener : all) {
          try {
            call.accept(listener);
          } catch (RuntimeException e) {
            LoggerFactory.getLogger(DedupListener.class)
                .warn("DedupListener {} threw on {}; ignored", listener, event, e);
          }
        }
      }

      @Override
      public void claimTimed(DedupKey key, Duration elapsed) {
        each("claimTimed", l -> l.claimTimed(key, elapsed));
      }

      @Override
      public void claimed(DedupKey key, int attempt) {
        each("claimed", l -> l.claimed(key, attempt));
      }

      @Override
      public void duplicate(DedupKey key, DedupRecord existing) {
        each("duplicate", l -> l.duplicate(key, existing));
      }

      @Override
      public void inProgress(DedupKey key, DedupRecord existing) {
        each("inProgress", l -> l.inProgress(key, existing));
      }

      @Override
      public void conflict(DedupKey key, DedupRecord existing) {
        each("conflict", l -> l.conflict(key, existing));
      }

      @Override
      public void completed(DedupKey key, int attempt, Duration handlerTime) {
        each("completed", l -> l.completed(key, attempt, handlerTime));
      }

      @Override
      public void failed(DedupKey key, int attempt, Throwable error) {
        each("failed", l -> l.failed(key, attempt, error));
      }

      @Override
      public void leaseLost(DedupKey key, int attempt) {
        each("leaseLost", l -> l.leaseLost(key, attempt));
      }

      @Override
      public void storeFailed(DedupKey key, DedupStoreException error) {
        each("storeFailed", l -> l.storeFailed(key, error));
      }

      @Override
      public void keyMissing(String bizType, String source) {
        each("keyMissing", l -> l.keyMissing(bizType, source));
      }

      @Override
      public void purged(int count) {
        each("purged", l -> l.purged(count));
      }

      @Override
      public void purgeBacklog(long expiredRows, Duration oldestExpiredAge) {
        each("purgeBacklog", l -> l.purgeBacklog(expiredRows, oldestExpiredAge));
      }

      @Override
      public void purgeBacklogUnknown(RuntimeException error) {
        each("purgeBacklogUnknown", l -> l.purgeBacklogUnknown(error));
      }

      @Override
      public String toString() {
        return "CompositeListener" + all;
      }
    };
  }
}
