package io.consumerdedup.testing;

import org.junit.platform.launcher.LauncherSession;
import org.junit.platform.launcher.LauncherSessionListener;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** Stops the shared in-JVM broker once every test of the run has finished. */
public final class SharedBrokerShutdown implements LauncherSessionListener {
  private static final Logger log = LoggerFactory.getLogger(SharedBrokerShutdown.class);

  @Override
  public void launcherSessionClosed(LauncherSession session) {
    try {
      TestKafka.stop();
    } catch (Exception e) {
      // Every test has run; a broker that does not stop cleanly changes no result.
      log.warn("The shared test broker did not stop cleanly", e);
    }
  }
}
