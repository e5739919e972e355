package io.consumerdedup.examples.infra;

import io.consumerdedup.examples.Progress;
import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.util.ArrayList;
import java.util.List;
import org.jspecify.annotations.Nullable;

/**
 * The Kafka broker and PostgreSQL server the demo runs on: the ones named by the caller, or
 * embedded ones it starts now and stops on {@link #close()}.
 */
public final class Infrastructure implements AutoCloseable {
  private final String bootstrapServers;
  private final String jdbcUrl;
  private final List<AutoCloseable> started;

  private Infrastructure(String bootstrapServers, String jdbcUrl, List<AutoCloseable> started) {
    this.bootstrapServers = bootstrapServers;
    this.jdbcUrl = jdbcUrl;
    this.started = started;
  }

  /** Uses a running broker and server; stops nothing on close. */
  public static Infrastructure external(String bootstrapServers, String jdbcUrl) {
    return new Infrastructure(bootstrapServers, jdbcUrl, List.of());
  }

  /**
   * Uses the broker and server given, and starts embedded ones for those not given.
   *
   * @param jdbcUrl a PostgreSQL JDBC URL with credentials, or null for an embedded PostgreSQL
   * @param bootstrapServers a Kafka bootstrap list, or null for an in-JVM broker
   */
  public static Infrastructure start(
      @Nullable String bootstrapServers, @Nullable String jdbcUrl, Progress progress)
      throws Exception {
    List<AutoCloseable> started = new ArrayList<>();
    try {
      String jdbc = jdbcUrl;
      if (jdbc == null) {
        long start = System.nanoTime();
        progress.step("starting an embedded PostgreSQL (zonky) ...");
        EmbeddedPostgres postgres = EmbeddedPostgres.builder().start();
        started.add(postgres);
        jdbc = postgres.getJdbcUrl("postgres", "postgres");
        progress.step("PostgreSQL ready in " + seconds(start) + " s");
      } else {
        progress.step("using PostgreSQL at " + withoutCredentials(jdbc));
      }
      String kafka = bootstrapServers;
      if (kafka == null) {
        long start = System.nanoTime();
        progress.step("starting an in-JVM Kafka broker (KRaft) ...");
        EmbeddedKafkaBroker broker = EmbeddedKafkaBroker.start();
        started.add(0, broker);
        kafka = broker.bootstrapServers();
        progress.step("Kafka ready in " + seconds(start) + " s at " + kafka);
      } else {
        progress.step("using Kafka at " + kafka);
      }
      return new Infrastructure(kafka, jdbc, started);
    } catch (Exception | Error e) {
      closeAll(started, e);
      throw e;
    }
  }

  public String bootstrapServers() {
    return bootstrapServers;
  }

  /** The server's JDBC URL, with credentials and without a schema. */
  public String jdbcUrl() {
    return jdbcUrl;
  }

  @Override
  public void close() throws Exception {
    Exception failure = new Exception("Could not stop the demo's infrastructure");
    closeAll(started, failure);
    if (failure.getSuppressed().length > 0) {
      throw failure;
    }
  }

  private static void closeAll(List<AutoCloseable> resources, Throwable collector) {
    for (AutoCloseable resource : resources) {
      try {
        resource.close();
      } catch (Exception e) {
        collector.addSuppressed(e);
      }
    }
  }

  private static String seconds(long startNanos) {
    return String.format("%.1f", (System.nanoTime() - startNanos) / 1e9);
  }

  private static String withoutCredentials(String jdbcUrl) {
    int query = jdbcUrl.indexOf('?');
    return query < 0 ? jdbcUrl : jdbcUrl.substring(0, query);
  }
}
