package io.consumerdedup.examples.scenario;

import java.util.List;

/** The scenarios, in the order the demo runs and the report lists them. */
public final class Scenarios {
  private Scenarios() {}

  public static List<Scenario> all() {
    return List.of(
        new LostAckScenario(),
        new ProducerRetryScenario(),
        new ProviderCallbackScenario(),
        new BankTimeoutScenario(),
        new ZombieConsumerScenario(),
        new FanOutScenario(),
        new SpringListenerScenario(),
        new CrashMidHandlerScenario(),
        new ShareQueueScenario());
  }
}
