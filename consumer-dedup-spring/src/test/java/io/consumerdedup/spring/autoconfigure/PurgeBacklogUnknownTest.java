package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.jdbc.DedupJanitor;
import io.consumerdedup.jdbc.JdbcDedupAdmin;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.FaultyDataSource;
import io.consumerdedup.testing.TestDatabase;
import java.time.Duration;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.Status;

/**
 * The health and the Actuator summary while the janitor's backlog count fails (cancelled by the
 * server at the statement timeout): the backlog shows as unknown, not as a count.
 */
class PurgeBacklogUnknownTest {
  private String schema;
  private FaultyDataSource dataSource;
  private JdbcDedupStore store;
  private DedupJanitor janitor;

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("backlogunknown");
    dataSource = FaultyDataSource.on(schema, 2, Duration.ofSeconds(10));
    store =
        JdbcDedupStore.builder(dataSource)
            .statementTimeout(Duration.ofSeconds(1))
            .retryMaxAttempts(1)
            .build();
    janitor = DedupJanitor.builder(store).build();
  }

  @AfterEach
  void tearDown() {
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void healthAndSummaryShowTheBacklogUnknownWhileItsCountFails() {
    ConsumerDedupHealthIndicator health = new ConsumerDedupHealthIndicator(store, janitor);
    ConsumerDedupEndpoint endpoint =
        new ConsumerDedupEndpoint(JdbcDedupAdmin.of(store), store, false, janitor);
    janitor.purgeExpired();
    assertThat(health.health().getDetails().get("purge"))
        .isInstanceOf(ConsumerDedupEndpoint.BacklogView.class);

    dataSource.timeOutEvery("AS oldest_ms", "consumer_dedup");
    janitor.purgeExpired();

    Health afterFailedCount = health.health();
    assertThat(afterFailedCount.getStatus()).isEqualTo(Status.UP);
    assertThat(afterFailedCount.getDetails()).containsEntry("purge", "unknown");
    @SuppressWarnings("unchecked")
    Map<String, Object> summary = (Map<String, Object>) endpoint.summary().getBody();
    assertThat(summary).containsEntry("purge", "unknown");
    assertThat(summary.get("purgeError").toString()).contains("canceling statement");
    assertThat(dataSource.statementsTimedOut()).isEqualTo(2);
  }
}
