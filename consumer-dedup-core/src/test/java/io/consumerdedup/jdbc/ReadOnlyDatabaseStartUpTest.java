package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.StoreFixture;
import io.consumerdedup.testing.TestDatabase;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.LoggerFactory;

/**
 * The DataSource points at a database that takes no writes (a replica's reader endpoint, a hot
 * standby; here a session made read-only, which refuses writes with the same 25006). The table and
 * the privileges look right there, so start-up was quiet, and every record then waited, a WARN at
 * each back-off, with nothing saying why. Building the executor now warns, naming the cause.
 */
class ReadOnlyDatabaseStartUpTest {
  @RegisterExtension static final StoreFixture fixture = new StoreFixture("read_only", 1);

  private final ListAppender<ILoggingEvent> logged = new ListAppender<>();
  private final Logger storeLog = (Logger) LoggerFactory.getLogger(JdbcDedupStore.class);
  private HikariDataSource pool;

  @BeforeEach
  void setUp() {
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(TestDatabase.url(fixture.schema()));
    config.setConnectionInitSql("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY");
    config.setMaximumPoolSize(2);
    pool = new HikariDataSource(config);
    logged.start();
    storeLog.addAppender(logged);
  }

  @AfterEach
  void tearDown() {
    storeLog.detachAppender(logged);
    pool.close();
  }

  @Test
  void aReadOnlyDatabaseIsNamedWhenTheExecutorIsBuilt() {
    JdbcDedupStore store = JdbcDedupStore.builder(pool).build();

    try (IdempotentExecutor executor = IdempotentExecutor.builder(store).build()) {
      assertThat(executor).isNotNull();
    }

    assertThat(logged.list)
        .filteredOn(event -> event.getLevel() == Level.WARN)
        .extracting(ILoggingEvent::getFormattedMessage)
        .as("warnings as the executor was built")
        .anySatisfy(
            warning ->
                assertThat(warning)
                    .contains("connects to a database that is read-only")
                    .contains("Point the DataSource at the primary"));
  }
}
