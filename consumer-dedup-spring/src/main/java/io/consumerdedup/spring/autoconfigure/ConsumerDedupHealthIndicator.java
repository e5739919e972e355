package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.jdbc.DedupJanitor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.SqlDialect;
import java.util.List;
import org.jspecify.annotations.Nullable;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.HealthIndicator;

/**
 * Health {@code consumerdedup}: UP when the dedup table answers with every column the store uses;
 * DOWN with the reason (the database cannot be reached, the table is missing, columns are missing).
 * One try, no retries, so the health endpoint answers at once. When this instance runs the janitor,
 * its last measured backlog is a detail ({@code purge}; {@code behind: true} when the oldest
 * expired record expired more than {@link DedupJanitor#BEHIND_AFTER_INTERVALS} intervals ago;
 * {@code unknown} before the first count and while the last one failed): the table still answers,
 * so the status stays UP.
 */
public class ConsumerDedupHealthIndicator implements HealthIndicator {
  private final JdbcDedupStore store;
  private final @Nullable DedupJanitor janitor;

  public ConsumerDedupHealthIndicator(JdbcDedupStore store) {
    this(store, null);
  }

  /** With the janitor whose last measured backlog is a detail, if this instance runs one. */
  public ConsumerDedupHealthIndicator(JdbcDedupStore store, @Nullable DedupJanitor janitor) {
    this.store = store;
    this.janitor = janitor;
  }

  @Override
  public Health health() {
    List<String> missing;
    try {
      missing = store.missingColumnsNow();
    } catch (DedupStoreException | DedupConfigurationException e) {
      return Health.down()
          .withDetail("table", store.tableName())
          .withDetail("reason", String.valueOf(e.getMessage()))
          .build();
    }
    String dialect = store.dialect().map(Enum::name).orElse("unknown");
    if (missing.isEmpty()) {
      Health.Builder up =
          Health.up().withDetail("table", store.tableName()).withDetail("dialect", dialect);
      if (janitor != null) {
        up.withDetail(
            "purge",
            janitor
                .lastBacklog()
                .<Object>map(ConsumerDedupEndpoint.BacklogView::of)
                .orElse(ConsumerDedupEndpoint.UNKNOWN_BACKLOG));
      }
      return up.build();
    }
    String schemaFile = store.dialect().orElse(SqlDialect.POSTGRESQL).schemaResource();
    boolean absent = missing.size() == JdbcDedupStore.EXPECTED_COLUMN_COUNT;
    return Health.down()
        .withDetail("table", store.tableName())
        .withDetail("dialect", dialect)
        .withDetail("missingColumns", missing)
        .withDetail(
            "reason",
            (absent ? "The table does not exist" : "The table lacks columns")
                + "; create it from the schema file "
                + schemaFile)
        .build();
  }
}
