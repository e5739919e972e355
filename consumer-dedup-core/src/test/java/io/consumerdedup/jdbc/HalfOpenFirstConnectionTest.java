package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.testing.FaultyDataSource;
import io.consumerdedup.testing.TestDatabase;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The very first connection the store gets stops answering (a failover or a network blip as the
 * application starts: the pool's first connection reaches a host that is gone). On that connection
 * the store looks at what it reaches (the database, a pooler) before anything else, and that look
 * ran before the connection's network timeout was set and with no statement timeout: it waited for
 * good, and so did the start-up that made it.
 */
class HalfOpenFirstConnectionTest {
  private static final Duration STATEMENT_TIMEOUT = Duration.ofSeconds(1);

  private String schema;
  private FaultyDataSource faulty;

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("halfopenfirst");
    faulty = FaultyDataSource.on(schema, 2, Duration.ofSeconds(5));
  }

  @AfterEach
  void tearDown() {
    faulty.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void anExecutorBuiltOnAFirstConnectionThatNeverAnswersStartsAndItsRecordsAreApplied()
      throws Exception {
    builtAndApplying(DedupMode.SEPARATE);
  }

  @Test
  void aTransactionalExecutorBuiltOnAFirstConnectionThatNeverAnswersStarts() throws Exception {
    builtAndApplying(DedupMode.TRANSACTIONAL);
  }

  private void builtAndApplying(DedupMode mode) throws Exception {
    JdbcDedupStore store =
        JdbcDedupStore.builder(faulty).statementTimeout(STATEMENT_TIMEOUT).build();
    faulty.hangNextConnection();

    CompletableFuture<IdempotentExecutor> building =
        CompletableFuture.supplyAsync(() -> IdempotentExecutor.builder(store).mode(mode).build());
    IdempotentExecutor executor;
    try {
      executor = building.get(15, TimeUnit.SECONDS);
    } catch (TimeoutException e) {
      throw new AssertionError(
          "[building an executor in mode " + mode + "] still waiting after 15 s", e);
    }
    assertThat(faulty.hungConnections()).as("half-open connections handed out").isEqualTo(1);
    try (executor) {
      if (mode == DedupMode.SEPARATE) {
        assertThat(
                executor
                    .execute(DedupKey.of("payment", "after-half-open"), () -> "charged")
                    .outcome())
            .isEqualTo(Outcome.PROCESSED);
      }
    }
  }
}
