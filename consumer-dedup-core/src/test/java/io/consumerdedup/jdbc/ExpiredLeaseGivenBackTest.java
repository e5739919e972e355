package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.IdempotentExecutor;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
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
    holderOutlivesATakeoverGivenBack(database, false);
  }

  /**
   * As above, but the holder's renewals reach the database again before its handler ends: the store
   * refuses them (the key is FAILED, held by nobody), which is no lost lease either.
   */
  @ParameterizedTest
  @ValueSource(strings = {"postgres", "mariadb"})
  void aHolderWhoseRenewalsAreRefusedAfterTheGiveBackIsNotToldItsLeaseWasLost(String database)
      throws Exception {
    holderOutlivesATakeoverGivenBack(database, true);
  }

  private void holderOutlivesATakeoverGivenBack(String database, boolean renewalsComeBack)
      throws Exception {
    JdbcDedupStore store = JdbcDedupStore.builder(databases.dataSource(database)).build();
    DedupKey key = DedupKey.of("given-back", UUID.randomUUID().toString());
    AtomicInteger effects = new AtomicInteger();
    List<String> lostLeases = new CopyOnWriteArrayList<>();
    CountDownLatch handlerStarted = new CountDownLatch(1);
    CountDownLatch handlerMayEnd = new CountDownLatch(1);
    RenewalsUnreachable holderStore = new RenewalsUnreachable(store);

    try (IdempotentExecutor holder =
            IdempotentExecutor.builder(holderStore)
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
      assertThat(store.releaseAll(List.of((ClaimResult.Claimed) taken)))
          .as("keys B no longer held")
          .isEmpty();

      if (renewalsComeBack) {
        holderStore.reachable = true;
        await()
            .atMost(Duration.ofSeconds(10))
            .untilAsserted(
                () ->
                    assertThat(holderStore.renewalsRefusedByTheStore.get())
                        .as("A's renewals the store refused")
                        .isPositive());
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
  private static final class RenewalsUnreachable implements DedupStore {
    private final DedupStore store;
    final AtomicInteger renewalsRefused = new AtomicInteger();
    final AtomicInteger renewalsRefusedByTheStore = new AtomicInteger();
    volatile boolean reachable;

    RenewalsUnreachable(DedupStore store) {
      this.store = store;
    }

    private DedupStoreException unreachable(DedupKey key) {
      renewalsRefused.incrementAndGet();
      return new DedupStoreException("Connection refused (the test's fault)", key, null, null);
    }

    @Override
    public boolean renew(ClaimResult.Claimed claim, Duration lease) {
      if (!reachable) {
        throw unreachable(claim.key());
      }
      boolean renewed = store.renew(claim, lease);
      if (!renewed) {
        renewalsRefusedByTheStore.incrementAndGet();
      }
      return renewed;
    }

    @Override
    public List<DedupKey> renewAll(List<ClaimResult.Claimed> claims, Duration lease) {
      if (!reachable) {
        throw unreachable(claims.get(0).key());
      }
      List<DedupKey> notRenewed = store.renewAll(claims, lease);
      renewalsRefusedByTheStore.addAndGet(notRenewed.size());
      return notRenewed;
    }

    @Override
    public ClaimResult claim(ClaimRequest request) {
      return store.claim(request);
    }

    @Override
    public List<ClaimResult> claimAll(List<ClaimRequest> requests) {
      return store.claimAll(requests);
    }

    @Override
    public ClaimResult claimInTransaction(ClaimRequest request) {
      return store.claimInTransaction(request);
    }

    @Override
    public boolean complete(ClaimResult.Claimed claim, Duration retention) {
      return store.complete(claim, retention);
    }

    @Override
    public List<DedupKey> completeAll(List<ClaimResult.Claimed> claims, Duration retention) {
      return store.completeAll(claims, retention);
    }

    @Override
    public ClaimCompleting claimCompleting(
        ClaimRequest request, List<ClaimResult.Claimed> completing, Duration retention) {
      return store.claimCompleting(request, completing, retention);
    }

    @Override
    public boolean fail(ClaimResult.Claimed claim, String error, Duration retention) {
      return store.fail(claim, error, retention);
    }

    @Override
    public List<DedupKey> failAll(List<Failure> failures, Duration retention) {
      return store.failAll(failures, retention);
    }

    @Override
    public Optional<DedupRecord> find(DedupKey key) {
      return store.find(key);
    }

    @Override
    public int purge(int limit) {
      return store.purge(limit);
    }

    @Override
    public boolean release(ClaimResult.Claimed claim) {
      return store.release(claim);
    }

    @Override
    public List<DedupKey> releaseAll(List<ClaimResult.Claimed> claims) {
      return store.releaseAll(claims);
    }

    @Override
    public void verifyReady(DedupMode mode) {
      store.verifyReady(mode);
    }
  }
}
