package io.consumerdedup.examples.scenario;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.examples.Progress;
import io.consumerdedup.examples.kafka.ConsumerSetup;
import io.consumerdedup.examples.kafka.ScenarioConsumer;
import io.consumerdedup.examples.report.RunStats;
import io.consumerdedup.examples.scenario.CrashMidHandlerConsumer.Protection;
import java.time.Duration;

/**
 * The payment consumer of the crash-mid-handler scenario, in a JVM of its own: it books the charge
 * of the first record and, still inside its handler (before SUCCESS, before any commit of the
 * record's transaction or offset), reports so on stdout and hangs until the parent kills it.
 *
 * <p>Arguments: bootstrap servers, JDBC URL (on the run's schema), topic, group, {@link Protection}
 * name, lease in milliseconds.
 */
public final class CrashMidHandlerChild {
  /** The line the parent waits for: the charge is written, nothing after it has happened. */
  static final String CHARGED_LINE = "CHARGED-NOTHING-ELSE";

  private CrashMidHandlerChild() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 6) {
      throw new IllegalArgumentException(
          "expected: bootstrapServers jdbcUrl topic group NONE|SEPARATE|TRANSACTIONAL leaseMillis");
    }
    String bootstrapServers = args[0];
    String topic = args[2];
    String group = args[3];
    Protection protection = Protection.valueOf(args[4]);
    Duration lease = Duration.ofMillis(Long.parseLong(args[5]));
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(args[1]);
    config.setMaximumPoolSize(3);
    RunStats stats = new RunStats();
    try (HikariDataSource dataSource = new HikariDataSource(config);
        CrashMidHandlerConsumer payments =
            CrashMidHandlerConsumer.create(
                protection,
                dataSource,
                lease,
                "child-jvm-" + ProcessHandle.current().pid(),
                group,
                "billing (child JVM)",
                stats,
                record -> ChildJvm.signalAndHang(CHARGED_LINE, stats));
        ScenarioConsumer consumer =
            payments.consumer(
                ConsumerSetup.builder(bootstrapServers, topic, group)
                    .name("billing")
                    .stats(stats)
                    .progress(Progress.to(System.out)))) {
      consumer.runUntilCommitted(1, Duration.ofSeconds(60));
    }
    throw new IllegalStateException("The child got past its charge: it was not killed in time");
  }
}
