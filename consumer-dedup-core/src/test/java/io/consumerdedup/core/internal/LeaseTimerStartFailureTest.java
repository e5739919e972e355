package io.consumerdedup.core.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.consumerdedup.core.DedupListener;
import io.consumerdedup.testing.StoreFixture;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The lease timer's thread starts with the first claim; while the process may start no more threads
 * ("unable to create native thread") each claim fails. Each such failure left a task on the timer
 * that, once a thread started, woke it every second for the rest of the executor's life, ahead of
 * the renewals: a long enough spell of it piled up more than the one thread could run.
 */
class LeaseTimerStartFailureTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("lease_timer_start", 2);

  private static final int REFUSED_STARTS = 3;

  private final AtomicInteger starts = new AtomicInteger();

  private final ThreadFactory refusingTheFirstStarts =
      running -> {
        if (starts.incrementAndGet() <= REFUSED_STARTS) {
          throw new OutOfMemoryError("unable to create native thread: possibly out of memory");
        }
        Thread thread = new Thread(running, "lease-timer-start-failure");
        thread.setDaemon(true);
        return thread;
      };

  @Test
  void startsThatFailedLeaveNoTaskOnTheTimer() throws Exception {
    try (LeaseRenewer renewer =
        new LeaseRenewer(
            db.store(),
            Duration.ofMinutes(1),
            Duration.ofSeconds(20),
            DedupListener.NOOP,
            refusingTheFirstStarts)) {
      for (int i = 0; i < REFUSED_STARTS; i++) {
        assertThatThrownBy(() -> renewer.after(Duration.ofMillis(1), () -> {}))
            .as("a task scheduled while no timer thread can start")
            .isInstanceOf(OutOfMemoryError.class);
      }
      CountDownLatch ran = new CountDownLatch(1);
      renewer.after(Duration.ofMillis(1), ran::countDown);
      assertThat(ran.await(5, TimeUnit.SECONDS)).as("the task once a thread started").isTrue();

      assertThat(starts).as("timer threads asked for").hasValue(REFUSED_STARTS + 1);
      assertThat(renewer.timerTasks())
          .as("tasks left on the timer: its own periodic one")
          .isEqualTo(1);
    }
  }
}
