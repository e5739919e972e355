package io.consumerdedup.core.internal;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStoreException;
import java.time.Duration;
import java.util.List;
import java.util.function.Consumer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Passes every event to each listener in turn, and keeps a faulty one from breaking the engine or
 * the listeners after it: its exception is logged and ignored.
 */
public final class CompositeListener implements DedupListener {
  private static final Logger log = LoggerFactory.getLogger(CompositeListener.class);

  private final List<DedupListener> listeners;

  public CompositeListener(List<DedupListener> listeners) {
    this.listeners = List.copyOf(listeners);
  }

  private void each(String event, Consumer<DedupListener> call) {
    for (DedupListener listener : listeners) {
      try {
        call.accept(listener);
      } catch (RuntimeException e) {
        log.warn("DedupListener {} threw on {}; ignored", listener, event, e);
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
  public String toString() {
    return "CompositeListener" + listeners;
  }
}
