package io.consumerdedup.examples.scenario;

import io.consumerdedup.examples.Progress;
import io.consumerdedup.examples.report.RunStats;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * A payment consumer in a JVM of its own, so that a scenario can kill it the way an OOM killer or a
 * failing node does: {@link Process#destroyForcibly()}, with no shutdown hook, no {@code finally},
 * no goodbye to the broker or the database.
 *
 * <p>The child tells the parent that it reached the point where it is to die by printing a signal
 * line ({@link #signalAndHang}) and then blocks, so the kill lands exactly there; should the parent
 * die first, the child ends itself there. Its other output is passed on as progress lines.
 */
final class ChildJvm implements AutoCloseable {
  /** The exit code of a child whose parent died before killing it. */
  static final int PARENT_GONE = 3;

  private final Process process;
  private final CompletableFuture<String> signal = new CompletableFuture<>();

  private ChildJvm(Process process) {
    this.process = process;
  }

  /**
   * Starts {@code mainClass} with {@code args} on this JVM's class path, and watches its output for
   * a line starting with {@code signalPrefix}.
   */
  static ChildJvm start(
      Class<?> mainClass, List<String> args, String signalPrefix, Progress progress)
      throws IOException {
    List<String> command = new ArrayList<>();
    command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
    // A child lives for a second or two: the C2 compiler would only cost start-up time.
    command.add("-XX:TieredStopAtLevel=1");
    command.add("-cp");
    command.add(System.getProperty("java.class.path"));
    command.add(mainClass.getName());
    command.addAll(args);
    ChildJvm child = new ChildJvm(new ProcessBuilder(command).redirectErrorStream(true).start());
    child.watchOutput(signalPrefix, progress);
    return child;
  }

  private void watchOutput(String signalPrefix, Progress progress) {
    Thread reader =
        new Thread(
            () -> {
              try (BufferedReader lines =
                  new BufferedReader(
                      new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = lines.readLine()) != null) {
                  if (line.startsWith(signalPrefix)) {
                    signal.complete(line);
                  } else {
                    progress.step("  child JVM | " + line.strip());
                  }
                }
                signal.completeExceptionally(
                    new IllegalStateException(
                        "The child JVM ended before it printed " + signalPrefix));
              } catch (IOException e) {
                signal.completeExceptionally(e);
              }
            },
            "child-jvm-" + process.pid() + "-output");
    reader.setDaemon(true);
    reader.start();
  }

  long pid() {
    return process.pid();
  }

  /**
   * Waits for the signal line and returns it.
   *
   * @throws IllegalStateException if the child ended or stayed silent for {@code timeout}
   */
  String awaitSignal(Duration timeout) throws InterruptedException {
    try {
      return signal.get(timeout.toMillis(), TimeUnit.MILLISECONDS);
    } catch (TimeoutException e) {
      throw new IllegalStateException("The child JVM did not signal within " + timeout, e);
    } catch (ExecutionException e) {
      throw new IllegalStateException("The child JVM did not signal", e.getCause());
    }
  }

  /** Kills the child (SIGKILL on Unix), waits for it to be gone, and returns its exit code. */
  int kill() throws InterruptedException {
    process.destroyForcibly();
    return process.waitFor();
  }

  /** Kills the child if it still runs: a scenario that failed must not leave it behind. */
  @Override
  public void close() throws InterruptedException {
    if (process.isAlive()) {
      kill();
    }
  }

  /**
   * In the child: prints {@code signal} and the counts the parent's report needs, then blocks until
   * the process is killed, or ends it if the parent is gone.
   */
  static void signalAndHang(String signal, RunStats stats) {
    System.out.println(
        signal
            + " "
            + stats.deliveredCount()
            + " "
            + stats.handlerRunCount()
            + " "
            + stats.duplicatesSkippedCount());
    System.out.flush();
    // Wait on stdin, the parent's pipe, rather than sleep: if the parent dies before it kills us
    // (Ctrl-C, a CI job's timeout), the pipe reaches its end and we go too, the way the kill would
    // have done it (no finally, no commit), instead of hanging on in the group with our
    // connections.
    try {
      while (System.in.read() >= 0) {}
    } catch (IOException e) {
      // The pipe broke: the parent is gone just the same.
    }
    Runtime.getRuntime().halt(PARENT_GONE);
  }

  /** In the parent: adds the counts a child sent with its signal line to {@code stats}. */
  static void addCounts(String signalLine, RunStats stats) {
    String[] counts = signalLine.split(" ");
    stats.add(
        Integer.parseInt(counts[1]), Integer.parseInt(counts[2]), Integer.parseInt(counts[3]));
  }
}
