package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.core.DedupListener;
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
import org.springframework.boot.actuate.endpoint.web.WebEndpointResponse;
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

  /**
   * The application's listener throws an {@code Error} when told the backlog the summary measured
   * (a {@code NoSuchMethodError} of a metrics library of another version): the summary still
   * answers, counts and backlog, as a janitor run goes on past the same listener.
   */
  @Test
  void aListenerThatThrowsAnErrorWhenToldTheBacklogDoesNotTakeTheSummaryDown() {
    DedupJanitor reporting =
        DedupJanitor.builder(store)
            .listener(
                new DedupListener() {
                  @Override
                  public void purgeBacklog(long expiredRows, Duration oldestExpiredAge) {
                    throw new NoSuchMethodError(
                        "purgeBacklog, of a metrics library of another version");
                  }
                })
            .build();
    ConsumerDedupEndpoint endpoint =
        new ConsumerDedupEndpoint(JdbcDedupAdmin.of(store), store, false, reporting);

    Throwable thrown = catchThrowable(endpoint::summary);

    assertThat(thrown).as("what the summary threw at the web layer (a bare 500)").isNull();
    WebEndpointResponse<Object> summary = endpoint.summary();
    assertThat(summary.getStatus()).isEqualTo(200);
    @SuppressWarnings("unchecked")
    Map<String, Object> body = (Map<String, Object>) summary.getBody();
    assertThat(body).containsKey("counts");
    assertThat(body.get("purge")).isInstanceOf(ConsumerDedupEndpoint.BacklogView.class);
  }
}
