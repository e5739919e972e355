package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.JdbcTransactionalLoops.outcomes;
import static io.consumerdedup.kafka.JdbcTransactionalLoops.send;
import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.orderNo;
import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.jdbc.TransactionBoundDataSource;
import io.consumerdedup.micrometer.MicrometerDedupListener;
import io.consumerdedup.testing.ConnectionSource;
import io.consumerdedup.testing.TestKafka;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Mode TRANSACTIONAL with {@link JdbcTransactionalProcessor}: a transaction commits, and handing
 * its connection back to the pool meets an {@code Error} (an OutOfMemoryError in the pool's
 * bookkeeping). The transaction's outcome was decided, but the Error went out of {@code
 * inTransaction} past the telling of its news: a poll's transaction was taken for rolled back and
 * run again record by record, each record a duplicate of itself and none counted processed; a
 * record's own transaction was taken for the handler's failure, and the loop ended on it.
 */
class JdbcTransactionalReleaseErrorTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_tx_release");

  @ParameterizedTest(name = "a transaction per poll: {0}")
  @ValueSource(booleans = {true, false})
  void aTransactionWhoseConnectionCannotBeHandedBackIsStillCountedProcessed(boolean perPoll)
      throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    String first = fixture.topic() + "-RE-1";
    String second = fixture.topic() + "-RE-2";
    send(fixture, first);
    send(fixture, second);

    SimpleMeterRegistry registry = new SimpleMeterRegistry();
    ClosingErrorSource pool = new ClosingErrorSource(fixture.dataSource());
    Map<String, AtomicInteger> applied = new ConcurrentHashMap<>();
    List<Exception> deadLettered =
        JdbcTransactionalLoops.runUntilCommitted(
            fixture,
            TransactionBoundDataSource.of(pool),
            new MicrometerDedupListener(registry),
            perPoll ? JdbcTransactionalProcessor::of : JdbcTransactionalProcessor::perRecord,
            record -> {
              applied.computeIfAbsent(orderNo(record), k -> new AtomicInteger()).incrementAndGet();
              pool.strikeNextClose();
            },
            2);

    assertThat(pool.struck).as("hand-backs of a connection that threw an Error").hasValue(1);
    assertThat(applied).as("records applied").containsOnlyKeys(first, second);
    assertThat(applied.values()).allSatisfy(n -> assertThat(n).as("applied").hasValue(1));
    for (String key : List.of(first, second)) {
      assertThat(fixture.store().find(DedupKey.of(BIZ_TYPE, key)).orElseThrow().status())
          .isEqualTo(DedupStatus.SUCCESS);
    }
    assertThat(deadLettered).as("dead-lettered").isEmpty();
    assertThat(outcomes(registry, "processed")).as("records counted processed").isEqualTo(2.0);
    assertThat(outcomes(registry, "duplicate"))
        .as("records counted duplicate, each processed once")
        .isZero();
  }

  /** A pool whose next connection handed back, once armed, throws an OutOfMemoryError. */
  private static final class ClosingErrorSource extends ConnectionSource {
    private final DataSource pool;
    private final AtomicBoolean armed = new AtomicBoolean();
    final AtomicInteger struck = new AtomicInteger();

    ClosingErrorSource(DataSource pool) {
      this.pool = pool;
    }

    /** Only once: the records run again after the strike find their connections sound. */
    void strikeNextClose() {
      if (struck.get() == 0) {
        armed.set(true);
      }
    }

    @Override
    public Connection getConnection() throws SQLException {
      Connection connection = pool.getConnection();
      return (Connection)
          Proxy.newProxyInstance(
              Connection.class.getClassLoader(),
              new Class<?>[] {Connection.class},
              (proxy, method, args) -> {
                if (method.getName().equals("close") && armed.compareAndSet(true, false)) {
                  struck.incrementAndGet();
                  connection.close();
                  throw new OutOfMemoryError("Java heap space, handing a connection back");
                }
                try {
                  return method.invoke(connection, args);
                } catch (InvocationTargetException e) {
                  throw e.getCause();
                }
              });
    }

    @Override
    public <T> T unwrap(Class<T> iface) throws SQLException {
      return pool.unwrap(iface);
    }

    @Override
    public boolean isWrapperFor(Class<?> iface) {
      try {
        return pool.isWrapperFor(iface);
      } catch (SQLException e) {
        return false;
      }
    }
  }
}
