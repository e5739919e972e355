package io.consumerdedup.core.internal;

import static org.assertj.core.api.Assertions.assertThat;

import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.AppenderBase;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.testing.StoreFixture;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.LoggerFactory;

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
    AtomicInteger logThrew = new AtomicInteger();
    Logger renewerLog = (Logger) LoggerFactory.getLogger(LeaseRenewer.class);
    AppenderBase<ILoggingEvent> failing =
        new AppenderBase<>() {
          @Override
          protected void append(ILoggingEvent event) {
            if (event.getMessage().startsWith("Could not start a lease renewal")) {
              logThrew.incrementAndGet();
              throw new OutOfMemoryError("Java heap space, formatting the ERROR");
            }
          }
        };
    failing.start();
    renewerLog.addAppender(failing);
    try (LeaseRenewer renewer =
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
      assertThat(logThrew.get()).as("ERROR lines that threw").isPositive();
      assertThat(ran).as("the retry, run after its first start failed").isTrue();
    } finally {
      renewerLog.detachAppender(failing);
    }
  }
}
