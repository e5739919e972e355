package io.consumerdedup.examples.scenario;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.examples.Progress;
import io.consumerdedup.examples.kafka.ConsumerLoop;
import io.consumerdedup.examples.kafka.ConsumerSetup;
import io.consumerdedup.examples.kafka.DedupConsumer;
import io.consumerdedup.examples.kafka.ScenarioConsumer;
import io.consumerdedup.examples.ledger.Bank;
import io.consumerdedup.examples.ledger.EffectHandler;
import io.consumerdedup.examples.ledger.EffectKind;
import io.consumerdedup.examples.ledger.Ledger;
import io.consumerdedup.examples.report.RunStats;
import io.consumerdedup.jdbc.JdbcDedupStore;
import java.time.Duration;

/**
 * The payment consumer of the lost-ACK scenario, in a JVM of its own: it charges the first record,
 * reports so on stdout, and then hangs before committing the offset, until the parent kills it.
 *
 * <p>Arguments: bootstrap servers, JDBC URL (on the run's schema), topic, group, {@code with} or
 * {@code without} dedup, lease in milliseconds.
 */
public final class LostAckChild {
  /** The line the parent waits for: the charge is booked, the offset is not committed. */
  static final String CHARGED_LINE = "CHARGED-NOT-COMMITTED";

  private LostAckChild() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 6) {
      throw new IllegalArgumentException(
          "expected: bootstrapServers jdbcUrl topic group with|without leaseMillis");
    }
    String bootstrapServers = args[0];
    String topic = args[2];
    String group = args[3];
    boolean withDedup = args[4].equals("with");
    Duration lease = Duration.ofMillis(Long.parseLong(args[5]));
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(args[1]);
    config.setMaximumPoolSize(3);
    try (HikariDataSource dataSource = new HikariDataSource(config);
        IdempotentExecutor executor =
            IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build())
                .lease(lease)
                .build()) {
      RunStats stats = new RunStats();
      EffectHandler payments =
          new EffectHandler(
              new Ledger(dataSource),
              EffectKind.CHARGE,
              LostAckScenario.KEY_HEADER,
              Bank.healthy(),
              "billing (child JVM)",
              stats);
      ConsumerSetup setup =
          ConsumerSetup.builder(bootstrapServers, topic, group)
              .name("billing")
              .stats(stats)
              .progress(Progress.to(System.out))
              .beforeCommit(() -> ChildJvm.signalAndHang(CHARGED_LINE, stats))
              .build();
      try (ScenarioConsumer consumer =
          withDedup
              ? new DedupConsumer(
                  setup,
                  ScenarioRun.idempotent(
                      executor, group, "payment", LostAckScenario.KEY_HEADER, payments))
              : new ConsumerLoop(setup, payments)) {
        consumer.runUntilCommitted(1, Duration.ofSeconds(60));
      }
    }
    throw new IllegalStateException("The child committed its offset: it was not killed in time");
  }
}
