package io.consumerdedup.examples;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.examples.report.ScenarioResult;
import io.consumerdedup.examples.scenario.ProducerRetryScenario;
import io.consumerdedup.examples.scenario.Scenario;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;

/** How the demo goes on when a scenario cannot run. */
class DemoRunAllTest {

  /**
   * A scenario whose classes do not link (a class path without one of Spring's modules, a static
   * initializer that throws) fails with an {@link Error}, not an exception: the demo must still run
   * the other scenarios and print their report, and fail.
   */
  @Test
  void aScenarioFailingWithALinkageErrorIsReportedAndTheOthersStillRun() {
    ByteArrayOutputStream progress = new ByteArrayOutputStream();

    List<ScenarioResult> results =
        Demo.runAll(context(progress), List.of(unlinkable(), new ProducerRetryScenario()));

    assertThat(results)
        .as("the scenario after the one that could not run")
        .extracting(ScenarioResult::title)
        .singleElement()
        .asString()
        .startsWith("2. Impatient user");
    assertThat(progress.toString(StandardCharsets.UTF_8))
        .contains("[unlinkable] COULD NOT RUN: java.lang.NoClassDefFoundError");
  }

  @Test
  void theReportOfADemoInWhichAScenarioCouldNotRunSaysSoInsteadOfSuccess() {
    ByteArrayOutputStream printed = new ByteArrayOutputStream();

    boolean passed =
        Demo.runAndReport(
            context(new ByteArrayOutputStream()),
            List.of(unlinkable(), new ProducerRetryScenario()),
            new PrintStream(printed, true, StandardCharsets.UTF_8));

    assertThat(passed).as("the demo's exit status").isFalse();
    assertThat(printed.toString(StandardCharsets.UTF_8))
        .as("the report of a demo in which 1 of 2 scenarios could not run")
        .doesNotContain("RESULT: with dedup, every scenario applied")
        .contains("RESULT: FAILED")
        .contains("1 scenario(s) could not run");
  }

  private static DemoContext context(ByteArrayOutputStream progress) {
    return new DemoContext(
        TestKafka.bootstrapServers(),
        TestDatabase.baseUrl(),
        DemoSettings.fast(),
        Progress.to(new PrintStream(progress, true, StandardCharsets.UTF_8)));
  }

  private static Scenario unlinkable() {
    return new Scenario() {
      @Override
      public String id() {
        return "unlinkable";
      }

      @Override
      public ScenarioResult run(DemoContext context) {
        throw new NoClassDefFoundError("org/springframework/boot/SpringApplication");
      }
    };
  }
}
