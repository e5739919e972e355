package io.consumerdedup.bench;

import com.zaxxer.hikari.HikariDataSource;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.TimeoutException;
import javax.sql.DataSource;
import org.jspecify.annotations.Nullable;

/**
 * What a {@link Variant} gets for one run: the workload, a fresh consumer group, the probe, the
 * handler, and a connection pool opened on first use and closed by the harness when the run ends
 * (so that the database's commit count can be read).
 */
public final class RunContext implements AutoCloseable {
  /** Every variant gets a pool of the same size; each runs on one consumer thread. */
  static final int POOL_SIZE = 4;

  private final Workload workload;
  private final BenchBroker broker;
  private final String groupId;
  private final Probe probe;
  private final HandlerEffects effects;
  private final BenchDatabase database;
  private final Duration timeout;
  private final long deadlineNanos;
  private @Nullable HikariDataSource pool;

  RunContext(
      Workload workload,
      BenchBroker broker,
      String groupId,
      Probe probe,
      HandlerEffects effects,
      BenchDatabase database,
      Duration timeout) {
    this.workload = workload;
    this.broker = broker;
    this.groupId = groupId;
    this.probe = probe;
    this.effects = effects;
    this.database = database;
    this.timeout = timeout;
    this.deadlineNanos = System.nanoTime() + timeout.toNanos();
  }

  /** The messages to consume. */
  public Workload workload() {
    return workload;
  }

  /** The run's consumer group, new to the broker. */
  public String groupId() {
    return groupId;
  }

  /** Where the run's measurements go. */
  public Probe probe() {
    return probe;
  }

  /** The business handler: run it for each record that is not a duplicate. */
  public HandlerEffects effects() {
    return effects;
  }

  /**
   * A consumer in the run's group that reports polls and commits to the probe: String keys and
   * values, no auto-commit, reading from the earliest offset. The caller subscribes and closes it
   * (or hands it to a loop that does).
   */
  public MeasuredConsumer newConsumer() {
    return new MeasuredConsumer(broker.consumerConfig(groupId), probe);
  }

  /**
   * Settings of a share consumer in the run's group, as a share group (V9, V10, V11) that starts at
   * the earliest record: String keys and values. It does not report to the probe by itself.
   */
  Map<String, Object> shareConsumerConfig() throws Exception {
    return broker.shareConsumerConfig(groupId);
  }

  /** The broker's address, for a consumer the variant's framework makes itself. */
  String bootstrapServers() {
    return broker.bootstrapServers();
  }

  /**
   * The benchmark database's JDBC URL, for a framework that opens its own pool (of {@link
   * #POOL_SIZE} connections, as every variant's); the harness waits for its sessions to end.
   */
  String jdbcUrl() {
    return database.url();
  }

  /** The run's HikariCP pool on the benchmark database, opened now if it is not yet. */
  public DataSource dataSource() {
    if (pool == null) {
      pool = database.openPool("bench-" + groupId, POOL_SIZE);
    }
    return pool;
  }

  /**
   * Waits until the probe has seen every record, for a loop running on another thread.
   *
   * @throws TimeoutException if the run's time is up first
   */
  public void awaitAllDone() throws InterruptedException, TimeoutException {
    probe.awaitAllDone(Duration.ofNanos(Math.max(0, deadlineNanos - System.nanoTime())));
  }

  /**
   * Fails the run if its time is up, for a loop that checks as it goes.
   *
   * @throws TimeoutException if it is
   */
  public void checkTime() throws TimeoutException {
    if (System.nanoTime() > deadlineNanos) {
      throw new TimeoutException(
          "Only "
              + probe.done()
              + " of "
              + workload.messages()
              + " records were done after "
              + timeout);
    }
  }

  /** Closes the pool, if one was opened. */
  @Override
  public void close() {
    if (pool != null) {
      pool.close();
    }
  }
}
