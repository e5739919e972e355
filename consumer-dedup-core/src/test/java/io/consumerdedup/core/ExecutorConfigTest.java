package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.consumerdedup.jdbc.DedupJanitor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.ConnectionSource;
import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.postgresql.ds.PGSimpleDataSource;

/** Configuration is validated where it is given, with the bad value in the message. No I/O. */
class ExecutorConfigTest {
  // Building a store does not connect; building an executor checks the table once, and a database
  // that cannot be reached is only logged there, so these tests need none.
  private final DedupStore store = JdbcDedupStore.builder(ConnectionSource.refusing()).build();

  @Test
  void defaultsAreTheDocumentedOnes() {
    try (IdempotentExecutor executor = IdempotentExecutor.builder(store).build()) {
      assertThat(executor.lease()).isEqualTo(Duration.ofMinutes(5));
      assertThat(executor.renewalInterval()).isEqualTo(Duration.ofSeconds(100));
      assertThat(executor.successRetention()).isEqualTo(Duration.ofDays(7));
      assertThat(executor.failedRetention()).isEqualTo(Duration.ofDays(30));
      assertThat(executor.inProgressPolicy()).isEqualTo(InProgressPolicy.THROW);
      assertThat(executor.conflictPolicy()).isEqualTo(ConflictPolicy.THROW);
      assertThat(executor.mode()).isEqualTo(DedupMode.SEPARATE);
      assertThat(executor.ownerId())
          .matches(".+-" + ProcessHandle.current().pid() + "-[0-9a-f]{6}");
    }
  }

  @Test
  void twoExecutorsInOneJvmHaveDifferentOwnerIds() {
    try (IdempotentExecutor a = IdempotentExecutor.builder(store).build();
        IdempotentExecutor b = IdempotentExecutor.builder(store).build()) {
      assertThat(a.ownerId()).isNotEqualTo(b.ownerId());
    }
  }

  @Test
  void nonPositiveDurationsAreRefusedNamingTheSetting() {
    assertThatThrownBy(() -> IdempotentExecutor.builder(store).lease(Duration.ofSeconds(-5)))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("lease must be positive, was PT-5S");
    assertThatThrownBy(() -> IdempotentExecutor.builder(store).successRetention(Duration.ZERO))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("successRetention must be positive, was PT0S");
    assertThatThrownBy(() -> IdempotentExecutor.builder(store).failedRetention(Duration.ZERO))
        .hasMessage("failedRetention must be positive, was PT0S");
    assertThatThrownBy(() -> IdempotentExecutor.builder(store).waitTimeout(Duration.ofMillis(-1)))
        .hasMessage("waitTimeout must be positive, was PT-0.001S");
  }

  @Test
  void theRenewalIntervalMustBeShorterThanTheLease() {
    assertThatThrownBy(
            () ->
                IdempotentExecutor.builder(store)
                    .lease(Duration.ofSeconds(30))
                    .renewalInterval(Duration.ofSeconds(30))
                    .build())
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage(
            "renewalInterval (PT30S) must be shorter than the lease (PT30S), or the lease runs out"
                + " between renewals");
  }

  @Test
  void anOwnerIdMustFitTheColumn() {
    assertThatThrownBy(() -> IdempotentExecutor.builder(store).ownerId("o".repeat(129)))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith("ownerId must be 1 to 128 characters");
    assertThatThrownBy(() -> IdempotentExecutor.builder(store).ownerId(" "))
        .isInstanceOf(IllegalArgumentException.class);
  }

  @Test
  void aClosedExecutorRefusesWorkBeforeClaimingAnything() {
    IdempotentExecutor executor = IdempotentExecutor.builder(store).ownerId("closing").build();
    executor.close();

    assertThatThrownBy(() -> executor.execute(DedupKey.of("payment", "late"), () -> "ran"))
        .isInstanceOf(DedupExecutorClosedException.class)
        .hasMessageStartingWith("IdempotentExecutor closing is closed")
        .satisfies(
            e ->
                assertThat(Disposition.of(e))
                    .as("held by a poll loop, not failed or dead-lettered")
                    .isEqualTo(Disposition.RETRY_LATER));
  }

  @Test
  void storeRetrySettingsAreValidated() {
    PGSimpleDataSource dataSource = new PGSimpleDataSource();
    assertThatThrownBy(() -> JdbcDedupStore.builder(dataSource).retryMaxAttempts(0))
        .hasMessage("retryMaxAttempts must be at least 1, was 0");
    assertThatThrownBy(
            () ->
                JdbcDedupStore.builder(dataSource)
                    .retryInitialBackoff(Duration.ofSeconds(5))
                    .retryMaxBackoff(Duration.ofSeconds(1))
                    .build())
        .hasMessage("retryInitialBackoff (PT5S) must not exceed retryMaxBackoff (PT1S)");
  }

  @Test
  void janitorSettingsAreValidated() {
    assertThatThrownBy(() -> DedupJanitor.builder(store).batchSize(0))
        .hasMessage("batchSize must be at least 1, was 0");
    assertThatThrownBy(() -> DedupJanitor.builder(store).interval(Duration.ZERO))
        .hasMessage("interval must be positive, was PT0S");
  }
}
