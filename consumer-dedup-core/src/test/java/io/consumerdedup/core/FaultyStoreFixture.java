package io.consumerdedup.core;

import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.FaultyDataSource;
import io.consumerdedup.testing.StoreFixture;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.extension.BeforeEachCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * The {@link StoreFixture} of the store-fault tests: its {@link #store()} reaches the database
 * whatever the faults (a rival, or a look at the table); per test a {@link FaultyDataSource} onto
 * the same schema, and the completions and lost leases that the test's executors reported.
 */
final class FaultyStoreFixture extends StoreFixture implements BeforeEachCallback {
  private FaultyDataSource faulty;
  private final List<String> events = new CopyOnWriteArrayList<>();
  private final DedupListener recording =
      new DedupListener() {
        @Override
        public void completed(DedupKey key, int attempt, Duration handlerTime) {
          events.add("completed " + key.bizKey() + " attempt " + attempt);
        }

        @Override
        public void leaseLost(DedupKey key, int attempt) {
          events.add("leaseLost " + key.bizKey() + " attempt " + attempt);
        }
      };

  FaultyStoreFixture(String schemaPrefix) {
    super(schemaPrefix, 4);
  }

  @Override
  public void beforeEach(ExtensionContext context) {
    events.clear();
    faulty = FaultyDataSource.on(schema(), 4, Duration.ofMillis(500));
  }

  @Override
  public void afterEach(ExtensionContext context) {
    super.afterEach(context); // the executors first, while their connections still work
    faulty.close();
  }

  /** This test's data source through the fault-injecting proxy. */
  FaultyDataSource faulty() {
    return faulty;
  }

  /** A store builder over {@link #faulty()}, with retries short enough for tests. */
  JdbcDedupStore.Builder faultyStore() {
    return JdbcDedupStore.builder(faulty)
        .retryInitialBackoff(Duration.ofMillis(50))
        .retryMaxBackoff(Duration.ofMillis(200))
        .retryMaxDuration(Duration.ofSeconds(1));
  }

  /** Records "completed KEY attempt N" and "leaseLost KEY attempt N" in {@link #events()}. */
  DedupListener recording() {
    return recording;
  }

  /** What {@link #recording()} heard in this test. */
  List<String> events() {
    return events;
  }
}
