package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.SqlDialect;
import java.util.List;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.HealthIndicator;

/**
 * Health {@code consumerdedup}: UP when the dedup table answers with every column the store uses;
 * DOWN with the reason (the database cannot be reached, the table is missing, columns are missing).
 * One try, no retries, so the health endpoint answers at once.
 */
public class ConsumerDedupHealthIndicator implements HealthIndicator {
  private final JdbcDedupStore store;

  public ConsumerDedupHealthIndicator(JdbcDedupStore store) {
    this.store = store;
  }

  @Override
  public Health health() {
    List<String> missing;
    try {
      missing = store.missingColumnsNow();
    } catch (DedupStoreException e) {
      return Health.down()
          .withDetail("table", store.tableName())
          .withDetail("reason", String.valueOf(e.getMessage()))
          .build();
    }
    String dialect = store.dialect().map(Enum::name).orElse("unknown");
    if (missing.isEmpty()) {
      return Health.up()
          .withDetail("table", store.tableName())
          .withDetail("dialect", dialect)
          .build();
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
