package io.consumerdedup.spring;

import io.consumerdedup.spring.internal.PollAwareConsumer;
import org.jspecify.annotations.Nullable;

/**
 * The end of an {@link Idempotent} listener's call whose outcomes are written: the offset commits
 * it made through its {@code Consumer} argument, held until then, are sent, and then the
 * acknowledgment it made is passed on.
 */
final class HeldCallEnd {
  private HeldCallEnd() {}

  /**
   * Releases {@code commits}, sending them, then runs {@code acknowledgment}. What sending them
   * throws (an {@code Error} of an application's commit callback, which Kafka runs as it sends the
   * next commit) is thrown once the acknowledgment is passed on: the outcomes are written, and an
   * acknowledgment dropped there left the call's records uncommitted when the {@code Error} stopped
   * the container, and, under {@code asyncAcks}, kept spring-kafka from committing anything past
   * them.
   */
  static void passOn(PollAwareConsumer.@Nullable CommitHold commits, Runnable acknowledgment) {
    try {
      if (commits != null) {
        commits.release(true);
      }
    } catch (RuntimeException | Error thrown) {
      try {
        acknowledgment.run();
      } catch (RuntimeException | Error also) {
        if (also != thrown) {
          thrown.addSuppressed(also);
        }
      }
      throw thrown;
    }
    acknowledgment.run();
  }
}
