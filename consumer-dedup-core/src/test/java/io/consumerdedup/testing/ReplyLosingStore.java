package io.consumerdedup.testing;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.DedupStoreUnavailableException;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * A {@link DedupStore} in front of a real one whose next claim, once armed, is committed by the
 * database and then answered with the exception a store throws when it gave up on an unreachable
 * database: what a caller sees when the reply of a committed claim was lost and the store's own
 * retries did not get through either. Works on every dialect, where a network proxy is tied to one.
 */
public final class ReplyLosingStore {
  private final DedupStore store;
  private final AtomicBoolean loseNext = new AtomicBoolean();
  private final AtomicReference<Error> errorNext = new AtomicReference<>();
  private final AtomicInteger repliesLost = new AtomicInteger();
  private final AtomicLong lastLossNanos = new AtomicLong();

  private ReplyLosingStore(DedupStore target) {
    this.store =
        InterceptedStore.around(
            target,
            (method, args, proceed) -> {
              Object result = proceed.call();
              boolean claim =
                  method.getName().equals("claim") || method.getName().equals("claimAll");
              Error error = claim ? errorNext.getAndSet(null) : null;
              if (error != null) {
                lastLossNanos.set(System.nanoTime());
                repliesLost.incrementAndGet();
                throw error;
              }
              if (claim && loseNext.compareAndSet(true, false)) {
                lastLossNanos.set(System.nanoTime());
                repliesLost.incrementAndGet();
                throw new DedupStoreUnavailableException(
                    "Dedup store claim failed: connection reset (reply lost after the commit)",
                    firstKey(args[0]).key(),
                    firstKey(args[0]).source(),
                    null);
              }
              return result;
            });
  }

  /** A store in front of {@code target}. */
  public static ReplyLosingStore in(DedupStore target) {
    return new ReplyLosingStore(target);
  }

  /** The store to give the executor. */
  public DedupStore store() {
    return store;
  }

  /** Arms a one-shot fault: the next claim commits and its reply is lost. */
  public void loseNextClaimReply() {
    loseNext.set(true);
  }

  /**
   * Arms a one-shot fault: the next claim commits and its answer is lost to {@code error} (an
   * {@link OutOfMemoryError} while the answer is read, say), thrown to the caller.
   */
  public void loseNextClaimReplyTo(Error error) {
    errorNext.set(error);
  }

  /** How many claim replies were lost. */
  public int repliesLost() {
    return repliesLost.get();
  }

  /** {@link System#nanoTime()} when the last reply was lost (after the claim committed). */
  public long lastLossNanos() {
    return lastLossNanos.get();
  }

  private static ClaimRequest firstKey(Object argument) {
    return argument instanceof List<?> requests
        ? (ClaimRequest) requests.get(0)
        : (ClaimRequest) argument;
  }
}
