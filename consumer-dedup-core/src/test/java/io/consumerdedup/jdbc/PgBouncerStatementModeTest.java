package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestPgBouncer;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * PgBouncer in statement pool mode ends any client connection that opens a transaction ({@code
 * FATAL: transaction blocks not allowed in statement pooling mode}, SQL state 08P01, which reads as
 * a lost connection). The store's claims are single statements and went through, so the application
 * started; a group's lease renewals and releases, which run in a transaction of their own, failed
 * as "unavailable" at every try, and the leases of long handlers ran out under them.
 */
class PgBouncerStatementModeTest {
  private static final Duration LEASE = Duration.ofMinutes(1);
  private static final Duration KEEP = Duration.ofDays(1);

  private String schema;
  private HikariDataSource pool;

  @BeforeEach
  void setUp() {
    pool = TestPgBouncer.dataSource(TestPgBouncer.statementModeUrl(), 2);
    schema = TestDatabase.newSchema("stmtmode");
  }

  @AfterEach
  void tearDown() {
    if (pool != null) {
      pool.close();
    }
    if (schema != null) {
      TestDatabase.dropSchema(schema);
    }
  }

  private JdbcDedupStore store() {
    return JdbcDedupStore.builder(pool)
        .tableName(schema + ".consumer_dedup")
        .retryMaxDuration(Duration.ofSeconds(1))
        .build();
  }

  @Test
  void anExecutorIsNotBuiltOnAStatementModePool() {
    Throwable refused = catchThrowable(() -> IdempotentExecutor.builder(store()).build().close());

    assertThat(refused)
        .as("[building an executor on a PgBouncer in statement pool mode]")
        .isInstanceOf(DedupConfigurationException.class)
        .hasMessageContaining("pool_mode = statement")
        .hasMessageContaining("pool_mode = transaction");
  }

  @Test
  void aGroupsRenewalIsNotLeftToFailAsUnavailable() {
    JdbcDedupStore store = store();
    String run = UUID.randomUUID().toString();

    Throwable failed =
        catchThrowable(
            () -> {
              List<ClaimResult> claims =
                  store.claimAll(
                      List.of(
                          request(DedupKey.of("t", run + "-1")),
                          request(DedupKey.of("t", run + "-2"))));
              store.renewAll(claims.stream().map(ClaimResult.Claimed.class::cast).toList(), LEASE);
            });

    assertThat(failed)
        .as("[claims of two keys, then their renewal as a group]")
        .isInstanceOf(DedupConfigurationException.class)
        .hasMessageContaining("pool_mode = statement");
  }

  private static ClaimRequest request(DedupKey key) {
    return new ClaimRequest(key, "consumer", LEASE, KEEP, null, null);
  }
}
