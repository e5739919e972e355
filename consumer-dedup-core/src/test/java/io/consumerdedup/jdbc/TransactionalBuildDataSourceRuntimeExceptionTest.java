package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.Disposition;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.ConnectionSource;
import io.consumerdedup.testing.RoutingWithoutTarget;
import io.consumerdedup.testing.StoreFixture;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Building an executor in mode TRANSACTIONAL checks, on a connection of the store's own, that no
 * pooler would hand the handler's statements to another server connection. A DataSource that throws
 * a {@code RuntimeException} where JDBC says {@code SQLException} (Spring's routing DataSource
 * without a target for the thread, or a lazy connection over it; a pool behind an open circuit
 * breaker) threw it out of {@code build()} as it came, while mode SEPARATE builds and logs that the
 * table could not be checked: a plain consumer's program, and a Spring application (which builds
 * each listener's executor at start-up), did not start, where the README promises that a database
 * that does not answer at start-up is only logged. Each claim checks again.
 */
class TransactionalBuildDataSourceRuntimeExceptionTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("txbuild", 2);

  private final AtomicBoolean failing = new AtomicBoolean();

  @Test
  void anExecutorBuiltWhileTheDataSourceHasNoTargetHoldsTheRecordAndAppliesItOnceItAnswers() {
    buildWhileFailingThenApplyOnce(
        RoutingWithoutTarget.routing(db.dataSource(), failing::get), "TX-1");
  }

  @Test
  void anExecutorBuiltOnALazyConnectionWithoutATargetHoldsTheRecordAndAppliesItOnceItAnswers() {
    buildWhileFailingThenApplyOnce(
        RoutingWithoutTarget.lazy(db.dataSource(), failing::get), "TX-2");
  }

  private void buildWhileFailingThenApplyOnce(ConnectionSource dataSource, String orderNo) {
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(dataSource);
    JdbcDedupStore store = JdbcDedupStore.builder(transactions).retryMaxAttempts(1).build();
    AtomicReference<IdempotentExecutor> built = new AtomicReference<>();
    AtomicInteger handlerRuns = new AtomicInteger();
    failing.set(true);

    Throwable thrown =
        catchThrowable(
            () ->
                built.set(IdempotentExecutor.builder(store).mode(DedupMode.TRANSACTIONAL).build()));

    assertThat(thrown).as("what building threw").isNull();
    try (IdempotentExecutor executor = built.get()) {
      DedupKey key = DedupKey.of("payment", orderNo);
      Throwable claimed =
          catchThrowable(
              () ->
                  transactions.inTransaction(
                      () -> executor.execute(key, handlerRuns::incrementAndGet)));
      assertThat(handlerRuns).as("handler runs while the DataSource has no target").hasValue(0);
      assertThat(Disposition.of(claimed))
          .as("what the adapters do with %s", claimed)
          .isEqualTo(Disposition.RETRY_LATER);

      failing.set(false);
      transactions.inTransaction(() -> executor.execute(key, handlerRuns::incrementAndGet));
      transactions.inTransaction(() -> executor.execute(key, handlerRuns::incrementAndGet));
      assertThat(handlerRuns).as("handler runs once the DataSource answers").hasValue(1);
    }
  }
}
