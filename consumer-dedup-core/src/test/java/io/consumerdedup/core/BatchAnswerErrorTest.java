package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.testing.StoreFixture;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.time.Duration;
import java.util.AbstractList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * An {@code Error} (an {@code OutOfMemoryError}) as a poll's claims are read, once the store has
 * committed them and before anyone got them. Neither given back nor remembered, they kept their
 * keys PROCESSING, and the redelivery to this very process was told "in progress" by its own claim.
 */
class BatchAnswerErrorTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("batchanswer", 2);

  @Test
  void anErrorAsThePollsCommittedClaimsAreReadGivesThemBack() {
    AtomicBoolean strike = new AtomicBoolean(true);
    IdempotentExecutor executor =
        db.executor(
            IdempotentExecutor.builder(answersReadOnceShortOfMemory(db.store(), strike))
                .lease(Duration.ofSeconds(30)));
    DedupKey key = DedupKey.of("payment", "POLL-1");

    assertThatThrownBy(
            () ->
                executor.claimAll(
                    List.of(new IdempotentExecutor.Delivery(key, null, "payments-0@31"))))
        .isInstanceOf(OutOfMemoryError.class);

    DedupClaim[] redelivery = new DedupClaim[1];
    Throwable refused =
        catchThrowable(() -> redelivery[0] = executor.claim(key, null, "payments-0@31"));
    assertThat(refused).as("what the redelivery's claim threw").isNull();
    assertThat(redelivery[0].attempt()).as("the redelivery's attempt").isEqualTo(1);
    redelivery[0].complete();
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  /**
   * The give-back of the claims fails with the very {@code Error} that struck the answers (the JVM
   * throws its one preallocated {@code OutOfMemoryError} again once it cannot build another). Added
   * to itself as suppressed, it was replaced by an {@code IllegalArgumentException}
   * ("Self-suppression not permitted"): the poll loop was told of a bug in its arguments rather
   * than of memory running out. The claims are remembered, and the redelivery takes its key up.
   */
  @Test
  void aGiveBackFailingWithTheSameErrorThrowsThatErrorAndTheRedeliveryTakesTheKeyUp() {
    AtomicBoolean strike = new AtomicBoolean(true);
    OutOfMemoryError preallocated = new OutOfMemoryError("Java heap space");
    DedupStore answersAndGiveBackShortOfMemory =
        releasesRefused(
            answersReadOnceShortOfMemory(db.store(), strike, preallocated),
            preallocated,
            new AtomicBoolean(true));
    IdempotentExecutor executor =
        db.executor(
            IdempotentExecutor.builder(answersAndGiveBackShortOfMemory)
                .lease(Duration.ofSeconds(30)));
    DedupKey key = DedupKey.of("payment", "POLL-2");

    Throwable thrown =
        catchThrowable(
            () ->
                executor.claimAll(
                    List.of(new IdempotentExecutor.Delivery(key, null, "payments-0@32"))));

    assertThat(strike).as("the answers' Error struck").isFalse();
    assertThat(thrown).as("what the poll's claims threw").isSameAs(preallocated);
    DedupClaim[] redelivery = new DedupClaim[1];
    Throwable refused =
        catchThrowable(() -> redelivery[0] = executor.claim(key, null, "payments-0@32"));
    assertThat(refused).as("what the redelivery's claim threw").isNull();
    redelivery[0].complete();
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }

  /** {@code target}, whose releases throw {@code error} while {@code refusing} is set. */
  private static DedupStore releasesRefused(
      DedupStore target, Error error, AtomicBoolean refusing) {
    return (DedupStore)
        Proxy.newProxyInstance(
            DedupStore.class.getClassLoader(),
            new Class<?>[] {DedupStore.class},
            (proxy, method, args) -> {
              if (method.getName().startsWith("release") && refusing.getAndSet(false)) {
                throw error;
              }
              try {
                return method.invoke(target, args);
              } catch (InvocationTargetException e) {
                throw e.getCause();
              }
            });
  }

  /**
   * {@code target}, whose batch claims commit and answer, but whose answer, the first time while
   * {@code strike} is set, is too big to be read: walking it throws an {@code OutOfMemoryError}.
   */
  private static DedupStore answersReadOnceShortOfMemory(DedupStore target, AtomicBoolean strike) {
    return answersReadOnceShortOfMemory(
        target, strike, new OutOfMemoryError("Java heap space, reading the claims' answers"));
  }

  /** As above, throwing {@code error}. */
  private static DedupStore answersReadOnceShortOfMemory(
      DedupStore target, AtomicBoolean strike, Error error) {
    return (DedupStore)
        Proxy.newProxyInstance(
            DedupStore.class.getClassLoader(),
            new Class<?>[] {DedupStore.class},
            (proxy, method, args) -> {
              Object answer;
              try {
                answer = method.invoke(target, args);
              } catch (InvocationTargetException e) {
                throw e.getCause();
              }
              if (!method.getName().equals("claimAll")) {
                return answer;
              }
              @SuppressWarnings("unchecked")
              List<ClaimResult> results = (List<ClaimResult>) answer;
              return new AbstractList<ClaimResult>() {
                @Override
                public ClaimResult get(int index) {
                  return results.get(index);
                }

                @Override
                public int size() {
                  return results.size();
                }

                @Override
                public Stream<ClaimResult> stream() {
                  if (strike.getAndSet(false)) {
                    throw error;
                  }
                  return results.stream();
                }
              };
            });
  }
}
