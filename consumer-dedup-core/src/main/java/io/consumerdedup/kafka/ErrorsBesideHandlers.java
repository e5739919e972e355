package io.consumerdedup.kafka;

import org.jspecify.annotations.Nullable;

/**
 * The {@link Error} an {@link IdempotentRecordHandler} met as it claimed a record's key, before the
 * handler ran (an {@code OutOfMemoryError} as the claim's answer was read), on the thread that
 * processes the record: the loops must not count it as a failed attempt of the handler. Passed
 * through a thread-local, as {@link MarksInFlight} is, since processors that wrap the handler pass
 * its Error on unchanged but know nothing of this.
 */
final class ErrorsBesideHandlers {
  @SuppressWarnings("ThreadLocalUsage") // the record each loop thread is processing
  private static final ThreadLocal<@Nullable Error> BESIDE = new ThreadLocal<>();

  private ErrorsBesideHandlers() {}

  /** {@code error} was met claiming the key of the record this thread is processing. */
  static void note(Error error) {
    BESIDE.set(error);
  }

  /** Whether {@code error} was noted on this thread as met claiming a key. */
  static boolean isBesideHandler(Error error) {
    return BESIDE.get() == error;
  }

  /**
   * For the loops, once a record's processing ended on {@code error}: whether it was noted on this
   * thread as met claiming a key. What was noted is forgotten either way, so that it is not taken
   * for the next record's.
   */
  static boolean wasBesideHandler(Error error) {
    boolean beside = isBesideHandler(error);
    clear();
    return beside;
  }

  /** Forgets what was noted on this thread. */
  static void clear() {
    BESIDE.remove();
  }
}
