package io.consumerdedup.spring.internal;

import io.consumerdedup.core.internal.FirstFailure;

/**
 * Runs a step for each index of a range whatever the step threw for another index, then rethrows
 * the first throwable, the later ones suppressed in it: the outcomes of a batch's records are each
 * written even when writing one of them meets an {@code Error} (an {@code OutOfMemoryError}).
 *
 * <p>It runs where an {@code OutOfMemoryError} may be the reason it runs, so it allocates nothing
 * before the steps: the step and what it works on are passed in, not captured by a lambda made for
 * the call (callers keep their step in a constant). The JVM may throw one {@code OutOfMemoryError}
 * instance again, and a throwable cannot suppress itself: that {@code IllegalArgumentException} was
 * what came out, and the later steps did not run.
 */
public final class EachRegardless {
  /** What to do for one index, on {@code target} with {@code argument}. */
  @FunctionalInterface
  public interface Step<T, A> {
    void run(T target, A argument, int index);
  }

  private EachRegardless() {}

  /**
   * Runs {@code step} for each index from {@code from} to before {@code end}.
   *
   * @throws Error the first one a step threw, if it was an {@code Error}
   * @throws RuntimeException the first one a step threw, otherwise
   */
  public static <T, A> void run(T target, A argument, int from, int end, Step<T, A> step) {
    Throwable first = null;
    for (int i = from; i < end; i++) {
      try {
        step.run(target, argument, i);
      } catch (RuntimeException | Error e) {
        first = FirstFailure.of(first, e);
      }
    }
    if (first instanceof Error error) {
      throw error;
    }
    if (first != null) {
      throw (RuntimeException) first;
    }
  }
}
