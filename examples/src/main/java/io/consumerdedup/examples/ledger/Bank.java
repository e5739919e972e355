package io.consumerdedup.examples.ledger;

import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The remote call a handler makes before it books its effect: it can be slow (a zombie consumer's
 * sick host) or time out (a flaky bank), as a real one does.
 */
public final class Bank {
  private final Duration latency;
  private final AtomicInteger timeoutsLeft;

  private Bank(Duration latency, int timeouts) {
    this.latency = latency;
    this.timeoutsLeft = new AtomicInteger(timeouts);
  }

  public static Bank healthy() {
    return new Bank(Duration.ZERO, 0);
  }

  /** Answers every call after {@code latency}. */
  public static Bank slow(Duration latency) {
    return new Bank(latency, 0);
  }

  /** Times out on the first {@code timeouts} calls, then answers. */
  public static Bank timingOutFirst(int timeouts) {
    return new Bank(Duration.ZERO, timeouts);
  }

  /**
   * Authorizes the action, or throws: nothing was charged when this throws.
   *
   * @throws BankTimeoutException on one of the first calls of a flaky bank
   */
  public void authorize(String businessKey) throws BankTimeoutException, InterruptedException {
    if (!latency.isZero()) {
      Thread.sleep(latency.toMillis());
    }
    if (timeoutsLeft.getAndUpdate(left -> Math.max(0, left - 1)) > 0) {
      throw new BankTimeoutException(
          "Bank call for " + businessKey + " timed out; nothing charged");
    }
  }

  /** The bank did not answer in time. */
  public static final class BankTimeoutException extends Exception {
    private static final long serialVersionUID = 1L;

    public BankTimeoutException(String message) {
      super(message);
    }
  }
}
