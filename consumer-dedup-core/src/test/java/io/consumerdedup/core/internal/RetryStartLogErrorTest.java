package io.consumerdedup.core.internal;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.DedupListener;
import io.consumerdedup.testing.StoreFixture;
import io.consumerdedup.testing.ThrowingLog;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The background retry of an outcome that could not be written (a SUCCESS kept while the database
 * was away) cannot start on a worker ("unable to create native thread"), and the ERROR saying so
 * cannot be logged either (an appender throwing an {@code Error}, out of memory again as the line
 * is formatted). The retry must go on at the next tick.
 */
class RetryStartLogErrorTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("retry_start_log", 2);

  /**
   * The ERROR line threw out of the periodic task, which the timer then cancelled for good: the
   * kept SUCCESS was never retried, its key left PROCESSING under a lease still renewed, and every
   * redelivery of its record "in progress" until a restart.
   */
  @Test
  void aRetryThatCouldNotStartAndWhoseErrorCouldNotBeLoggedRunsAtTheNextTick() throws Exception {
    AtomicInteger refused = new AtomicInteger();
    ThreadFactory refusingTheFirstWorker =
        running -> {
          if (refused.getAndIncrement() == 0) {
            throw new OutOfMemoryError("unable to create native thread: possibly out of memory");
          }
          Thread thread = new Thread(running, "retry-start-log-error");
          thread.setDaemon(true);
          return thread;
        };
    ThrowingLog errorLines =
        ThrowingLog.on(
            LeaseRenewer.class.getName(),
            "Could not start a lease renewal",
            () -> new OutOfMemoryError("Java heap space, formatting the ERROR"));
    try (errorLines;
        LeaseRenewer renewer =
            new LeaseRenewer(
                db.store(),
                Duration.ofMinutes(1),
                Duration.ofSeconds(20),
                DedupListener.NOOP,
                running -> {
                  Thread thread = new Thread(running, "retry-start-log-error-timer");
                  thread.setDaemon(true);
                  return thread;
                },
                refusingTheFirstWorker)) {
      CountDownLatch retried = new CountDownLatch(1);
      var retries = renewer.repeat(retried::countDown, Duration.ofMillis(50));
      boolean ran = retried.await(5, TimeUnit.SECONDS);
      retries.cancel(false);

      assertThat(refused.get()).as("worker threads refused").isPositive();
      assertThat(errorLines.threw()).as("ERROR lines that threw").isPositive();
      assertThat(ran).as("the retry, run after its first start failed").isTrue();
    }
  }
}
