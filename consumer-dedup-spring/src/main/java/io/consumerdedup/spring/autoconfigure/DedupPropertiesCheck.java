package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.internal.OwnerIds;
import io.consumerdedup.jdbc.DedupJanitor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.spring.IdempotentListenerInterceptor;
import java.time.Duration;

/**
 * The start-up check of {@link ConsumerDedupProperties}: every value, and the values that cannot be
 * meant together, so that a bad one stops the application with the property's name, the value and
 * what is allowed, instead of failing records later.
 */
final class DedupPropertiesCheck {

  private DedupPropertiesCheck() {}

  /**
   * @throws InvalidDedupPropertyException naming the first bad property, its value and what is
   *     allowed
   */
  static void check(ConsumerDedupProperties properties) {
    String tableName = properties.getTableName();
    try {
      JdbcDedupStore.checkTableName(tableName);
    } catch (IllegalArgumentException e) {
      throw invalid(
          "table-name", tableName, "an unquoted SQL identifier, optionally schema-qualified");
    }
    Duration lease = properties.getLease();
    atLeast("lease", lease, IdempotentListenerInterceptor.SHORTEST_LEASE);
    atLeast(
        "retention", properties.getRetention(), lease, "at least the lease (" + print(lease) + ")");
    atLeast(
        "failed-retention",
        properties.getFailedRetention(),
        lease,
        "at least the lease (" + print(lease) + ")");
    // The executor's builder refuses them too, but only once an executor is built, and naming its
    // own setting (successRetention), not the property.
    atMost("retention", properties.getRetention(), IdempotentExecutor.LONGEST_RETENTION);
    atMost(
        "failed-retention", properties.getFailedRetention(), IdempotentExecutor.LONGEST_RETENTION);
    positive("wait-timeout", properties.getWaitTimeout());
    positive("async-listener-timeout", properties.getAsyncListenerTimeout());
    positive("health-timeout", properties.getHealthTimeout());
    if (properties.getMaxAttempts() < 1) {
      throw invalid("max-attempts", properties.getMaxAttempts(), "at least 1");
    }
    String ownerId = properties.getOwnerId();
    if (ownerId != null) {
      try {
        OwnerIds.check(ownerId);
      } catch (IllegalArgumentException e) {
        // The executor is built at a listener's first record: left to it, a control character
        // started the application and failed that record instead.
        throw invalid("owner-id", OwnerIds.printable(ownerId), OwnerIds.ALLOWED);
      }
    }
    checkStore(properties.getStore());
    checkHold(properties.getHold());
    int deliveryCountLimit = properties.getShare().getDeliveryCountLimit();
    if (deliveryCountLimit < 2) {
      throw invalid(
          "share.delivery-count-limit",
          deliveryCountLimit,
          "at least 2 (Kafka's minimum), and equal to the broker's"
              + " group.share.delivery.count.limit");
    }
    positive("share.retry-backoff", properties.getShare().getRetryBackoff());
    positive("share.close-timeout", properties.getShare().getCloseTimeout());
    checkCleanup(properties.getCleanup());
  }

  private static void checkStore(ConsumerDedupProperties.Store store) {
    if (store.getRetryMaxAttempts() < 1) {
      throw invalid("store.retry-max-attempts", store.getRetryMaxAttempts(), "at least 1");
    }
    positive("store.retry-initial-backoff", store.getRetryInitialBackoff());
    atLeast(
        "store.retry-max-backoff",
        store.getRetryMaxBackoff(),
        store.getRetryInitialBackoff(),
        "at least store.retry-initial-backoff (" + print(store.getRetryInitialBackoff()) + ")");
    positive("store.retry-max-duration", store.getRetryMaxDuration());
    atLeast("store.statement-timeout", store.getStatementTimeout(), Duration.ofSeconds(1));
  }

  private static void checkHold(ConsumerDedupProperties.Hold hold) {
    positive("hold.initial-backoff", hold.getInitialBackoff());
    atLeast(
        "hold.max-backoff",
        hold.getMaxBackoff(),
        hold.getInitialBackoff(),
        "at least hold.initial-backoff (" + print(hold.getInitialBackoff()) + ")");
  }

  private static void checkCleanup(ConsumerDedupProperties.Cleanup cleanup) {
    positive("cleanup.interval", cleanup.getInterval());
    atMost("cleanup.interval", cleanup.getInterval(), DedupJanitor.LONGEST_DURATION);
    positive("cleanup.max-run-time", cleanup.getMaxRunTime());
    atMost("cleanup.max-run-time", cleanup.getMaxRunTime(), DedupJanitor.LONGEST_DURATION);
    if (cleanup.getBatchSize() < 1) {
      throw invalid("cleanup.batch-size", cleanup.getBatchSize(), "at least 1");
    }
    if (cleanup.getMaxBatchesPerRun() < 1) {
      throw invalid("cleanup.max-batches-per-run", cleanup.getMaxBatchesPerRun(), "at least 1");
    }
  }

  private static void positive(String property, Duration value) {
    if (value.isNegative() || value.isZero()) {
      throw invalid(property, print(value), "a positive duration, such as 30s");
    }
  }

  private static void atLeast(String property, Duration value, Duration least) {
    atLeast(property, value, least, "at least " + print(least));
  }

  private static void atLeast(String property, Duration value, Duration least, String allowed) {
    if (value.compareTo(least) < 0) {
      throw invalid(property, print(value), allowed);
    }
  }

  private static void atMost(String property, Duration value, Duration most) {
    if (value.compareTo(most) > 0) {
      throw invalid(property, print(value), "at most " + print(most));
    }
  }

  private static InvalidDedupPropertyException invalid(
      String property, Object value, String allowed) {
    return new InvalidDedupPropertyException("consumer-dedup." + property, value, allowed);
  }

  /** {@code value} as a user would write it: in its largest whole unit, such as 5m or 1500ms. */
  static String print(Duration value) {
    long millis = value.toMillis();
    long[] sizes = {86_400_000L, 3_600_000L, 60_000L, 1_000L};
    String[] units = {"d", "h", "m", "s"};
    for (int i = 0; i < sizes.length; i++) {
      if (millis != 0 && millis % sizes[i] == 0) {
        return millis / sizes[i] + units[i];
      }
    }
    return millis + "ms";
  }
}
