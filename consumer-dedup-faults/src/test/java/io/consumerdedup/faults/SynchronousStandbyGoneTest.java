package io.consumerdedup.faults;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.jdbc.JdbcDedupAdmin;
import io.consumerdedup.jdbc.JdbcDedupStore;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The synchronous standby that the high-availability guide recommends goes away and the primary
 * stays: every commit waits for it. PostgreSQL ends that wait when the statement is cancelled (the
 * commit stands locally, with a warning), which the store's statement timeout does for a statement
 * in auto-commit; the COMMIT that ends a store call's own transaction (a group's lease renewals or
 * releases) was not cancelled. Its client gave up at the network timeout, but the server went on
 * waiting with the transaction's row locks held and the renewal unseen, for as long as the standby
 * was away (an operator's change, in a transaction of its own too, alike): every later write of
 * those keys, their holders' SUCCESS marks included, waited on the locks and was cancelled at each
 * try, and each such COMMIT kept its server connection waiting.
 */
class SynchronousStandbyGoneTest {
  private static final Duration LEASE = Duration.ofMinutes(1);
  private static final Duration RETENTION = Duration.ofDays(1);

  private static final Duration STATEMENT_TIMEOUT = Duration.ofSeconds(1);

  /**
   * Each of the three calls ends at its first statement timeout (1 s) or so; their retries would
   * take longer.
   */
  private static final Duration BOUND = Duration.ofSeconds(6);

  @Test
  void aGroupsRenewalAndTheHoldersSuccessGoThroughWhileTheSynchronousStandbyIsAway()
      throws Exception {
    try (StreamingPair pair = new StreamingPair(true)) {
      String schema = "standby_gone";
      pair.createSchema(schema);
      HikariConfig config = new HikariConfig();
      config.setJdbcUrl(pair.url(schema));
      config.setMaximumPoolSize(4);
      config.setTransactionIsolation("TRANSACTION_READ_COMMITTED");
      try (HikariDataSource pool = new HikariDataSource(config)) {
        JdbcDedupStore store =
            JdbcDedupStore.builder(pool)
                .statementTimeout(STATEMENT_TIMEOUT)
                .retryMaxDuration(Duration.ofSeconds(3))
                .build();
        List<ClaimResult.Claimed> held = new ArrayList<>();
        for (String key : List.of("PAY-1", "PAY-2")) {
          held.add(
              (ClaimResult.Claimed)
                  store.claim(
                      new ClaimRequest(
                          DedupKey.of("payment", key), "holder", LEASE, RETENTION, null, null)));
        }

        pair.cutReplication();

        long cut = System.nanoTime();
        Throwable renewal = catchThrowable(() -> store.renewAll(held, LEASE));
        Throwable success = catchThrowable(() -> store.complete(held.get(0), RETENTION));
        // An operator's change runs in a transaction of its own too.
        Throwable forgotten =
            catchThrowable(
                () ->
                    assertThat(
                            JdbcDedupAdmin.of(store)
                                .forget(held.get(1).key(), "operator", true)
                                .applied())
                        .isTrue());
        long millis = Duration.ofNanos(System.nanoTime() - cut).toMillis();

        // One row of the suite's report, as each of its scenarios gives.
        List<String> violations = new ArrayList<>();
        if (renewal != null) {
          violations.add("the group's renewal failed: " + renewal);
        }
        if (success != null) {
          violations.add("the holder's SUCCESS failed: " + success);
        }
        if (forgotten != null) {
          violations.add("the operator's forget failed: " + forgotten);
        }
        // The fault happened: a COMMIT waited for the standby until its statement timeout. With
        // the standby still there, the three calls end in milliseconds and prove nothing.
        boolean standbyAway = millis >= STATEMENT_TIMEOUT.toMillis();
        if (!standbyAway) {
          violations.add(
              "the calls took " + millis + " ms: no COMMIT waited for the standby, still there");
        }
        if (millis >= BOUND.toMillis()) {
          violations.add("the calls took " + millis + " ms, over " + BOUND.toMillis() + " ms");
        }
        Reliability.record(
            new FaultRun.Verdict(
                "F30 synchronous standby gone",
                "SEPARATE store calls",
                held.size(),
                success == null ? 0 : 1,
                0,
                0,
                0,
                0,
                millis,
                BOUND.toMillis(),
                violations,
                List.of(
                    "a group's renewal, a holder's SUCCESS, an operator's forget, with the"
                        + " replication link cut:"
                        + " each COMMIT cancelled at the statement timeout, committed on the"
                        + " primary")));
        assertThat(renewal)
            .as("[a group's renewal while the synchronous standby is away]\n%s", pair.logs())
            .isNull();
        assertThat(success)
            .as("[the holder's SUCCESS after it, while the standby is still away]")
            .isNull();
        assertThat(forgotten)
            .as("[an operator's forced forget of the other key, the standby still away]")
            .isNull();
        assertThat(millis)
            .as("the three calls, in ms (a COMMIT waits for the standby until its timeout)")
            .isGreaterThanOrEqualTo(STATEMENT_TIMEOUT.toMillis())
            .isLessThan(BOUND.toMillis());
      }
    }
  }
}
