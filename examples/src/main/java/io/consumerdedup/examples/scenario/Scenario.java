package io.consumerdedup.examples.scenario;

import io.consumerdedup.examples.DemoContext;
import io.consumerdedup.examples.report.ScenarioResult;

/** An incident that makes people need dedup, run without and with the library. */
public interface Scenario {

  /** A short name for progress lines and {@code --only}, such as {@code lost-ack}. */
  String id();

  /** Runs the incident without and with dedup, each on a fresh topic, group and schema. */
  ScenarioResult run(DemoContext context) throws Exception;
}
