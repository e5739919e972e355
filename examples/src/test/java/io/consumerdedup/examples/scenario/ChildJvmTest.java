package io.consumerdedup.examples.scenario;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.examples.Progress;
import io.consumerdedup.examples.report.RunStats;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * A child JVM waits at its signal for the demo to kill it. If the demo dies first (Ctrl-C, a CI
 * job's timeout, an OOM kill), nobody will: the child must notice and end rather than hang forever,
 * a consumer still in its group and holding database connections.
 */
class ChildJvmTest {

  @Test
  void aChildWaitingToBeKilledEndsWhenTheDemoThatStartedItIsKilled() throws Exception {
    Process demo =
        new ProcessBuilder(
                Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-XX:TieredStopAtLevel=1",
                "-cp",
                System.getProperty("java.class.path"),
                DemoStartingAChild.class.getName())
            .redirectErrorStream(true)
            .start();
    Optional<ProcessHandle> child = Optional.empty();
    try {
      BufferedReader lines =
          new BufferedReader(new InputStreamReader(demo.getInputStream(), StandardCharsets.UTF_8));
      String line;
      while ((line = lines.readLine()) != null && !line.startsWith(DemoStartingAChild.CHILD)) {}
      assertThat(line).as("the demo's child reached its signal").isNotNull();
      child = ProcessHandle.of(Long.parseLong(line.substring(DemoStartingAChild.CHILD.length())));
      assertThat(child).as("the child is running").isPresent();
      assertThat(child.get().isAlive()).as("the child is waiting to be killed").isTrue();

      demo.destroyForcibly();
      assertThat(demo.waitFor(10, TimeUnit.SECONDS)).as("the demo was killed").isTrue();

      assertThat(child.get().onExit().completeOnTimeout(null, 10, TimeUnit.SECONDS).get())
          .as("the child of the killed demo, 10 s later: it must not be left running")
          .isNotNull();
    } finally {
      demo.destroyForcibly();
      child.ifPresent(ProcessHandle::destroyForcibly);
    }
  }

  /** The demo's side: starts a child as the scenarios do, then is killed while it waits. */
  public static final class DemoStartingAChild {
    static final String CHILD = "CHILD-PID ";

    public static void main(String[] args) throws Exception {
      ChildJvm child =
          ChildJvm.start(WaitingChild.class, List.of(), "SIGNAL", Progress.to(System.out));
      child.awaitSignal(Duration.ofSeconds(30));
      System.out.println(CHILD + child.pid());
      System.out.flush();
      Thread.sleep(Long.MAX_VALUE);
    }
  }

  /** The child's side: signals, as the scenarios' children do, and waits to be killed. */
  public static final class WaitingChild {
    public static void main(String[] args) {
      ChildJvm.signalAndHang("SIGNAL", new RunStats());
    }
  }
}
