package io.consumerdedup.core.internal;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/** Waits that an interrupt must not cut short. */
public final class Latches {
  private Latches() {}

  /**
   * Waits for {@code latch} until {@code deadline} ({@link System#nanoTime()}), going on through
   * interrupts: a loop's {@code close()} called from an interrupted thread (a shutdown on an
   * executor stopped with {@code shutdownNow}) must still wait for the record in hand. Whether the
   * latch reached zero is the caller's to read from the latch.
   *
   * @return whether the thread was interrupted meanwhile; the caller sets the interrupt again
   */
  public static boolean awaitThroughInterrupts(CountDownLatch latch, long deadline) {
    boolean interrupted = false;
    while (true) {
      try {
        latch.await(deadline - System.nanoTime(), TimeUnit.NANOSECONDS);
        return interrupted;
      } catch (InterruptedException e) {
        interrupted = true;
      }
    }
  }
}
