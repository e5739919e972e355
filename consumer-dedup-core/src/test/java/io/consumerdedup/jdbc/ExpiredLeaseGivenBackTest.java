package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupAttemptsExhaustedException;
import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.internal.SpentAttempts;
import io.consumerdedup.testing.InterceptedStore;
import java.lang.reflect.Method;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A holder whose renewals cannot reach the database runs its handler past its lease; another
 * consumer claims the key (taking the expired lease over) and gives it back without running the
 * handler (its partition revoked, its poll cut short). Nothing ran the handler after the holder, so
 * the holder's SUCCESS is the key's outcome and the next delivery is a duplicate. The FAILED the
 * give-back restores refused that SUCCESS as a lost lease, and the next delivery applied the
 * handler's effect a second time.
 */
class ExpiredLeaseGivenBackTest {
  private static final Duration SHORT_LEASE = Duration.ofSeconds(1);
  private static final Duration RETENTION = Duration.ofDays(1);

  @RegisterExtension static final TwoDatabases databases = new TwoDatabases("given_back");

  @RegisterExtension final CapturedWarnings warnings = new CapturedWarnings("io.consumerdedup");

  @ParameterizedTest
  @ValueSource(strings = {"postgres", "mariadb"})
  void theHandlerOfAHolderWhoseExpiredLeaseWasTakenOverAndGivenBackRunsOnce(String database)
      throws Exception {
    holderOutlivesATakeoverGivenBack(database, false, false);
  }

  /**
   * The holder's SUCCESS is refused while the other consumer still holds the key, which it gives
   * back unrun right after: the SUCCESS was dropped as "taken over" though sending it again would
   * be written, and the next delivery applied the handler's effect a second time.
   */
  @ParameterizedTest
  @ValueSource(strings = {"postgres", "mariadb"})
  void aSuccessRefusedJustBeforeTheTakeoverIsGivenBackIsWrittenAgain(String database)
      throws Exception {
    holderOutlivesATakeoverGivenBack(database, false, true);
  }

  /**
   * As above, but the holder's renewals reach the database again before its handler ends: the store
   * refuses them (the key is FAILED, held by nobody), which is no lost lease either.
   */
  @ParameterizedTest
  @ValueSource(strings = {"postgres", "mariadb"})
  void aHolderWhoseRenewalsAreRefusedAfterTheGiveBackIsNotToldItsLeaseWasLost(String database)
      throws Exception {
    holderOutlivesATakeoverGivenBack(database, true, false);
  }

  /**
   * Attempt 1 failed ("bank down"), attempt 2's process was killed, and a claim beyond the attempt
   * limit takes attempt 2's expired lease over, gives it back and dead-letters the record: the
   * takeover's note had replaced the failure, and the dead letter said the lease ran out instead of
   * what failed.
   */
  @ParameterizedTest
  @ValueSource(strings = {"postgres", "mariadb"})
  void aDeadLetterAfterATakeoverOfAnExpiredLeaseShowsTheHandlersError(String database)
      throws Exception {
    JdbcDedupStore store = JdbcDedupStore.builder(databases.dataSource(database)).build();
    DedupKey key = DedupKey.of("given-back", UUID.randomUUID().toString());
    ClaimResult.Claimed first =
        (ClaimResult.Claimed)
            store.claim(new ClaimRequest(key, "consumer-a", SHORT_LEASE, RETENTION, null, null));
    assertThat(store.fail(first, "bank down", RETENTION)).as("attempt 1 failed").isTrue();
    assertThat(store.claim(new ClaimRequest(key, "killed", SHORT_LEASE, RETENTION, null, null)))
        .as("attempt 2, whose process is killed")
        .isInstanceOf(ClaimResult.Claimed.class);
    await()
        .atMost(Duration.ofSeconds(10))
        .pollInterval(Duration.ofMillis(50))
        .until(() -> !store.find(key).orElseThrow().isLeaseLive());

    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(store).mode(DedupMode.SEPARATE).ownerId("consumer-b").build()) {
      DedupClaim beyond = executor.claim(key, null, "orders-0@7");
      assertThat(beyond.attempt()).as("the claim taking attempt 2 over").isEqualTo(3);
      DedupAttemptsExhaustedException deadLetter = SpentAttempts.giveBack(beyond, 2, executor);

      assertThat(deadLetter).as("what the record is dead-lettered with").isNotNull();
      assertThat(deadLetter.lastError()).as("the dead letter's last error").contains("bank down");
      assertThat(store.find(key).orElseThrow().lastError().orElse(""))
          .as("the last error in the table after the give-back")
          .endsWith(" | bank down");
    }
  }

  private void holderOutlivesATakeoverGivenBack(
      String database, boolean renewalsComeBack, boolean givenBackAfterTheSuccessIsRefused)
      throws Exception {
    JdbcDedupStore store = JdbcDedupStore.builder(databases.dataSource(database)).build();
    DedupKey key = DedupKey.of("given-back", UUID.randomUUID().toString());
    AtomicInteger effects = new AtomicInteger();
    List<String> lostLeases = new CopyOnWriteArrayList<>();
    CountDownLatch handlerStarted = new CountDownLatch(1);
    CountDownLatch handlerMayEnd = new CountDownLatch(1);
    RenewalsUnreachable holderStore = new RenewalsUnreachable(store);

    try (IdempotentExecutor holder =
            IdempotentExecutor.builder(holderStore.store)
                .mode(DedupMode.SEPARATE)
                .ownerId("consumer-a")
                .lease(SHORT_LEASE)
                .renewalInterval(Duration.ofMillis(200))
                .listener(
                    new DedupListener() {
                      @Override
                      public void leaseLost(DedupKey lostKey, int attempt) {
                        lostLeases.add(lostKey + " attempt " + attempt);
                      }
                    })
                .build();
        IdempotentExecutor next =
            IdempotentExecutor.builder(store)
                .mode(DedupMode.SEPARATE)
                .ownerId("consumer-c")
                .build()) {
      CompletableFuture<?> holderRun =
          CompletableFuture.supplyAsync(
              () ->
                  holder.execute(
                      key,
                      () -> {
                        effects.incrementAndGet();
                        handlerStarted.countDown();
                        handlerMayEnd.await(30, TimeUnit.SECONDS);
                        return "applied";
                      }));
      assertThat(handlerStarted.await(10, TimeUnit.SECONDS)).as("A's handler started").isTrue();
      await()
          .atMost(Duration.ofSeconds(10))
          .pollInterval(Duration.ofMillis(50))
          .until(() -> !store.find(key).orElseThrow().isLeaseLive());
      assertThat(holderStore.renewalsRefused.get()).as("A's renewals that failed").isPositive();

      // Consumer B's redelivery: its claim takes the expired lease over, then is given back unrun.
      ClaimResult taken =
          store
              .claimAll(
                  List.of(
                      new ClaimRequest(
                          key, "consumer-b", Duration.ofMinutes(1), RETENTION, null, "orders-0@7")))
              .get(0);
      assertThat(taken).isInstanceOf(ClaimResult.Claimed.class);
      assertThat(((ClaimResult.Claimed) taken).token()).as("B's claim").isEqualTo(2);
      Runnable giveBack =
          () ->
              assertThat(store.releaseAll(List.of((ClaimResult.Claimed) taken)))
                  .as("keys B no longer held")
                  .isEmpty();
      if (givenBackAfterTheSuccessIsRefused) {
        holderStore.afterAnOutcome = giveBack;
      } else {
        giveBack.run();
      }

      if (renewalsComeBack) {
        holderStore.reachable = true;
        await()
            .atMost(Duration.ofSeconds(10))
            .untilAsserted(
                () ->
                    assertThat(holderStore.renewalsRefusedByTheStore.get())
                        .as("A's renewals the store refused")
                        .isPositive());
        int findsBefore = holderStore.finds.get();
        Thread.sleep(1_500); // seven renewal intervals
        assertThat(holderStore.renewalsRefusedByTheStore.get())
            .as("A's renewals the store refused, 1.5 s after the first")
            .isLessThanOrEqualTo(2);
        assertThat(holderStore.finds.get() - findsBefore)
            .as("A's reads of the record meanwhile")
            .isLessThanOrEqualTo(1);
      }
      handlerMayEnd.countDown();
      Optional<Throwable> holderFailure =
          holderRun
              .handle((result, failure) -> Optional.ofNullable(failure))
              .get(30, TimeUnit.SECONDS);

      // Consumer C's redelivery of the same record.
      next.execute(
          key,
          () -> {
            effects.incrementAndGet();
            return "applied";
          });

      if (givenBackAfterTheSuccessIsRefused) {
        assertThat(holderStore.outcomesRefused.get())
            .as("A's outcome refused while B held the key")
            .isEqualTo(1);
      }
      assertThat(effects.get()).as("effects of the handler").isEqualTo(1);
      assertThat(holderFailure).as("A's execute").isEmpty();
      DedupRecord record = store.find(key).orElseThrow();
      assertThat(record.status()).as("the key's record").isEqualTo(DedupStatus.SUCCESS);
      assertThat(record.attempts()).as("the attempt whose SUCCESS it holds: A's").isEqualTo(1);
      assertThat(record.lastError()).as("the takeover's note, cleared by the SUCCESS").isEmpty();
      assertThat(lostLeases).as("leases reported lost").isEmpty();
      assertThat(warnings.all())
          .as("warnings")
          .noneMatch(line -> line.contains("taken over") || line.contains("released by"));
    }
  }

  /**
   * The store as A reaches it: its renewals fail as with the database unreachable, until {@link
   * #reachable}.
   */
  private static final class RenewalsUnreachable {
    final DedupStore store;
    final AtomicInteger renewalsRefused = new AtomicInteger();
    final AtomicInteger renewalsRefusedByTheStore = new AtomicInteger();
    final AtomicInteger finds = new AtomicInteger();
    final AtomicInteger outcomesRefused = new AtomicInteger();
    volatile boolean reachable;

    /** Run once after the first outcome the store refuses, before the refusal is answered. */
    volatile @Nullable Runnable afterAnOutcome;

    RenewalsUnreachable(DedupStore target) {
      this.store = InterceptedStore.around(target, this::call);
    }

    private @Nullable Object call(Method method, Object[] args, InterceptedStore.Proceed proceed)
        throws Throwable {
      switch (method.getName()) {
        case "renew", "renewAll" -> {
          if (!reachable) {
            renewalsRefused.incrementAndGet();
            throw new DedupStoreException(
                "Connection refused (the test's fault)", firstClaim(args[0]).key(), null, null);
          }
          Object answer = proceed.call();
          renewalsRefusedByTheStore.addAndGet(refusedIn(answer));
          return answer;
        }
        case "complete", "completeAll", "claimCompleting" -> {
          Object answer = proceed.call();
          refused(refusedIn(answer) > 0);
          return answer;
        }
        case "find" -> finds.incrementAndGet();
        default -> {}
      }
      return proceed.call();
    }

    private void refused(boolean refused) {
      Runnable hook = afterAnOutcome;
      if (refused && hook != null) {
        outcomesRefused.incrementAndGet();
        afterAnOutcome = null;
        hook.run();
      }
    }

    private static ClaimResult.Claimed firstClaim(Object claims) {
      return claims instanceof List<?> list
          ? (ClaimResult.Claimed) list.get(0)
          : (ClaimResult.Claimed) claims;
    }

    /** How many of its keys a renewal's or an outcome's answer says the store refused. */
    private static int refusedIn(@Nullable Object answer) {
      if (answer instanceof Boolean written) {
        return written ? 0 : 1;
      }
      if (answer instanceof DedupStore.ClaimCompleting completing) {
        return completing.leaseLost().size();
      }
      return ((List<?>) answer).size();
    }
  }
}
