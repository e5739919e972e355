package io.consumerdedup.spring.internal;

import org.apache.kafka.clients.consumer.Consumer;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * An {@code Error} met as a container's consumer thread clears the state of consumer-dedup's record
 * interceptors after a poll (an {@code OutOfMemoryError} giving claims back, the application's
 * {@code DedupListener} throwing one as a claim is settled, the application's record interceptor
 * composed before consumer-dedup's throwing one), held until the thread sets up its next poll and
 * thrown there.
 *
 * <p>spring-kafka calls {@code clearThreadState} from a {@code finally} of its consumer loop, past
 * the {@code catch} that stops a container on an {@code Error}: thrown there, the {@code Error}
 * ended the consumer thread without closing the consumer, which stayed in its group holding its
 * partitions until {@code max.poll.interval.ms} ran out, while the container still said it was
 * running and consumed nothing. {@code setupThreadState} runs just before the next poll, inside
 * that {@code catch}: the container stops as for any {@code Error}, its consumer closed (leaving
 * its group) and a {@code ConsumerStoppedEvent} published with reason {@code ERROR}. A container
 * that is stopping anyway polls no more, and the {@code Error} is only logged.
 */
public final class ThreadStateErrors {
  private static final Logger log = LoggerFactory.getLogger(ThreadStateErrors.class);

  /**
   * The {@code Error} held on this thread, with the consumer whose next poll is to throw it: a
   * thread of a pooled executor may run another container's consumer next, which must not stop for
   * it.
   */
  private static final ThreadLocal<@Nullable Held> HELD = new ThreadLocal<>();

  private record Held(Consumer<?, ?> consumer, Error error) {}

  private ThreadStateErrors() {}

  /**
   * Runs {@code clear} for {@code consumer}'s thread; an {@code Error} it throws is logged and held
   * for {@link #throwHeld} instead of thrown.
   */
  public static void clearing(Consumer<?, ?> consumer, Runnable clear) {
    try {
      clear.run();
    } catch (Error e) {
      log.error(
          "An Error as the consumer thread cleared the record interceptors' state after a poll:"
              + " the container stops before its next poll, as for any Error, closing its"
              + " consumer. consumer-dedup's claims being ended then are settled, given back, or"
              + " left to their leases; their records come again",
          e);
      Held held = HELD.get();
      if (held != null && held.consumer == consumer) {
        if (held.error != e) {
          held.error.addSuppressed(e);
        }
        return;
      }
      HELD.set(new Held(consumer, e));
    }
  }

  /**
   * Throws the {@code Error} held for {@code consumer} on this thread, if any; one held for another
   * consumer (an earlier container's) is dropped.
   */
  public static void throwHeld(Consumer<?, ?> consumer) {
    Held held = HELD.get();
    if (held == null) {
      return;
    }
    HELD.remove();
    if (held.consumer == consumer) {
      throw held.error;
    }
  }
}
