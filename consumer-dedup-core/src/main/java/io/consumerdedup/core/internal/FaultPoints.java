package io.consumerdedup.core.internal;

import org.jspecify.annotations.Nullable;

/**
 * The moments of a delivery at which the fault-injection suite stops or stalls a consumer, so that
 * a crash lands exactly where a guarantee is decided rather than wherever a random kill happens to
 * fall. For tests only: no hook is installed in production, and a point not hooked costs one
 * volatile read.
 */
public final class FaultPoints {

  /** Where a delivery can be interrupted, in the order a delivery passes them. */
  public enum Point {
    /** The claim statement is about to be sent. */
    BEFORE_CLAIM,
    /** A key was claimed (once per key held); its handler has not run yet. */
    AFTER_CLAIM,
    /**
     * A held claim whose handler did not run is ended to be given back ({@code releaseUnended}):
     * its renewal is stopped, and the store is not asked to release it yet.
     */
    GIVING_BACK,
    /** The handler returned; its SUCCESS is not written (the window of mode SEPARATE). */
    AFTER_HANDLER,
    /**
     * A held claim was ended ({@code complete}, {@code completeAsync}, {@code
     * completeWithNextClaim} or {@code fail}); its outcome is not yet written, queued or kept.
     * Reached again as the claim tries once more to hand over an outcome the first try did not.
     */
    ENDING,
    /**
     * The outcome writer took a group of SUCCESS marks from its queue, or a caller is to write its
     * own mark (the executor closed, or no writer could start); the write has not begun. Their
     * handlers have run.
     */
    SUCCESS_MARKS_TAKEN,
    /**
     * SUCCESS marks written in the background are about to be sent: a group of them by the outcome
     * writer, or one with the next claim of its thread. Their handlers have run.
     */
    BEFORE_SUCCESS_MARK,
    /** SUCCESS of a key is written; the record's offset is not committed yet. */
    AFTER_SUCCESS_MARK,
    /** The poll loop is about to commit offsets. */
    BEFORE_OFFSET_COMMIT,
    /**
     * The lease timer is about to start a renewal of the leases of claims made together (on the
     * timer's thread, while their handlers run).
     */
    RENEWAL_DUE
  }

  /** What a test does at a point; runs on the thread that reached it. */
  @FunctionalInterface
  public interface Hook {
    void reached(Point point);
  }

  private static volatile @Nullable Hook hook;

  private FaultPoints() {}

  /** Installs the test's hook, or removes it with null. */
  public static void install(@Nullable Hook newHook) {
    hook = newHook;
  }

  /** Called by the library at {@code point}. */
  public static void reached(Point point) {
    Hook current = hook;
    if (current != null) {
      current.reached(point);
    }
  }
}
