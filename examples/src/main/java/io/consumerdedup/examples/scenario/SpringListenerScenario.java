package io.consumerdedup.examples.scenario;

import io.consumerdedup.examples.DemoContext;
import io.consumerdedup.examples.ledger.EffectKind;
import io.consumerdedup.examples.report.RunRow;
import io.consumerdedup.examples.report.RunStats;
import io.consumerdedup.examples.report.ScenarioResult;
import io.consumerdedup.examples.spring.SpringPaymentsApplication;
import java.time.Duration;
import java.util.List;
import java.util.function.IntSupplier;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.WebApplicationType;
import org.springframework.context.ConfigurableApplicationContext;

/**
 * Scenarios 1 and 2 in a Spring Boot application whose listener carries {@code @Idempotent}: the
 * application charges order A-7001 and is shut down before acknowledging it (lost ACK), is started
 * again, and then receives order A-7002 twice (producer retry).
 */
public final class SpringListenerScenario implements Scenario {
  private static final String KEY_HEADER = "order-no";

  @Override
  public String id() {
    return "spring";
  }

  @Override
  public ScenarioResult run(DemoContext context) throws Exception {
    return new ScenarioResult(
        "7. Spring Boot: an @Idempotent @KafkaListener through a lost ACK (A-7001) and a"
            + " producer retry (A-7002)",
        "The same incidents as 1 and 2, in a Spring Boot application: the annotation and the"
            + " auto-configuration are all it takes.",
        List.of(runOnce(context, false), runOnce(context, true)),
        List.of(
            "without dedup = the same application with consumer-dedup.enabled=false;"
                + " delivered = handler runs + duplicates skipped (no failures here)"));
  }

  private RunRow runOnce(DemoContext context, boolean withDedup) throws Exception {
    try (ScenarioRun run = ScenarioRun.start(context, id(), ScenarioRun.mode(withDedup))) {
      run.ledger().open(EffectKind.CHARGE);
      RunStats stats = run.stats();
      run.send(KEY_HEADER, "A-7001", "confirm payment of 25.00");
      try (ConfigurableApplicationContext app = start(run, withDedup, false)) {
        run.progress().step("Spring application started; it charges without acknowledging");
        await(() -> stats.handlerRunCount(), 1, run, "the first charge");
      }
      run.progress()
          .step("application closed before acknowledging A-7001 (lost ACK); starting it again");
      try (ConfigurableApplicationContext app = start(run, withDedup, true)) {
        await(() -> stats.handlerRunCount() + stats.duplicatesSkippedCount(), 2, run, "A-7001");
        run.send(KEY_HEADER, "A-7002", "confirm payment of 25.00");
        run.send(KEY_HEADER, "A-7002", "confirm payment of 25.00 (producer retry)");
        await(() -> stats.handlerRunCount() + stats.duplicatesSkippedCount(), 4, run, "A-7002");
      }
      stats.add(stats.handlerRunCount() + stats.duplicatesSkippedCount(), 0, 0);
      return run.row(ScenarioRun.label(withDedup), withDedup, EffectKind.CHARGE, 2);
    }
  }

  private static ConfigurableApplicationContext start(
      ScenarioRun run, boolean withDedup, boolean acknowledge) {
    SpringApplication application = new SpringApplication(SpringPaymentsApplication.class);
    application.setWebApplicationType(WebApplicationType.NONE);
    application.setBannerMode(org.springframework.boot.Banner.Mode.OFF);
    application.setLogStartupInfo(false);
    application.addInitializers(
        context -> context.getBeanFactory().registerSingleton("demoStats", run.stats()));
    return application.run(
        "--logging.level.root=WARN",
        "--spring.datasource.url=" + run.jdbcUrl(),
        "--spring.datasource.hikari.maximum-pool-size=4",
        "--spring.kafka.bootstrap-servers=" + run.bootstrapServers(),
        "--spring.kafka.consumer.auto-offset-reset=earliest",
        "--spring.kafka.listener.ack-mode=manual",
        "--consumer-dedup.enabled=" + withDedup,
        "--consumer-dedup.lease=" + run.settings().lease().toMillis() + "ms",
        "--consumer-dedup.cleanup.enabled=false",
        "--demo.topic=" + run.topic(),
        "--demo.group=" + run.group("spring-billing"),
        "--demo.acknowledge=" + acknowledge);
  }

  private static void await(IntSupplier count, int expected, ScenarioRun run, String what)
      throws InterruptedException {
    Duration timeout = run.settings().runTimeout();
    long deadline = System.nanoTime() + timeout.toNanos();
    while (count.getAsInt() < expected) {
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException(
            "The Spring application did not handle " + what + " within " + timeout);
      }
      Thread.sleep(50);
    }
  }
}
