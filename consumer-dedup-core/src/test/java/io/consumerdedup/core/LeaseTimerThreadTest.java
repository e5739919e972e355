package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import java.util.Set;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * An executor built and not used, as a tool or a test that only looks at the table builds one, and
 * often never closes: it starts no lease thread, which would otherwise wake every second for the
 * life of the application. The first claim starts it; closing stops it.
 */
class LeaseTimerThreadTest {
  private static final String TIMER_THREAD = "consumer-dedup-lease-timer-";

  private String schema;
  private HikariDataSource pool;

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("lease_timer");
    pool = TestDatabase.dataSource(schema, 2);
  }

  @AfterEach
  void tearDown() {
    pool.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void anExecutorStartsItsLeaseTimerWithItsFirstClaimAndStopsItWhenClosed() throws Exception {
    Set<String> before = timerThreads();

    IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(pool).build()).build();
    assertThat(timerThreads()).as("timer threads after build").isEqualTo(before);

    executor.execute(DedupKey.of("payment", "p-1"), () -> "charged");
    Set<String> started = timerThreads();
    started.removeAll(before);
    assertThat(started).as("timer threads the first claim started").hasSize(1);

    executor.close();
    String timer = started.iterator().next();
    long deadline = System.nanoTime() + 5_000_000_000L;
    while (timerThreads().contains(timer) && System.nanoTime() < deadline) {
      Thread.sleep(20);
    }
    assertThat(timerThreads()).as("timer threads after close").doesNotContain(timer);
  }

  private static Set<String> timerThreads() {
    return Thread.getAllStackTraces().keySet().stream()
        .filter(Thread::isAlive)
        .map(Thread::getName)
        .filter(name -> name.startsWith(TIMER_THREAD))
        .collect(Collectors.toSet());
  }
}
