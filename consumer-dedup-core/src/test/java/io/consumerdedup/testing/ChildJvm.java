package io.consumerdedup.testing;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * A separate JVM running a {@code main} class of the test classpath, for crashes that must be real
 * (a killed process stops renewing its lease and never commits) and for races across processes.
 */
public final class ChildJvm implements AutoCloseable {
  private final Process process;
  private final BlockingQueue<String> lines = new LinkedBlockingQueue<>();
  private final List<String> output = new ArrayList<>();
  private final Thread reader;

  private ChildJvm(Process process) {
    this.process = process;
    reader =
        new Thread(
            () -> {
              try (BufferedReader in =
                  new BufferedReader(
                      new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                  lines.add(line);
                  synchronized (output) {
                    output.add(line);
                  }
                }
              } catch (IOException e) {
                // The child was killed: its output simply ends.
              }
            },
            "child-jvm-output");
    reader.setDaemon(true);
    reader.start();
  }

  /** Starts {@code main} in a new JVM with this JVM's classpath; stderr is merged into stdout. */
  public static ChildJvm start(Class<?> main, String... args) throws IOException {
    return start(Map.of(), main, args);
  }

  /**
   * As {@link #start(Class, String...)}, with {@code environment} added to the child's (a shifted
   * clock through {@code LD_PRELOAD}, for one).
   */
  public static ChildJvm start(Map<String, String> environment, Class<?> main, String... args)
      throws IOException {
    List<String> command = new ArrayList<>();
    command.add(ProcessHandle.current().info().command().orElse("java"));
    command.add("-cp");
    command.add(System.getProperty("java.class.path"));
    command.add("-Xmx256m");
    command.add("-XX:TieredStopAtLevel=1");
    command.add("-XX:+UseSerialGC");
    command.add("-Duser.timezone=" + java.util.TimeZone.getDefault().getID());
    command.add(main.getName());
    command.addAll(List.of(args));
    ProcessBuilder builder = new ProcessBuilder(command).redirectErrorStream(true);
    builder.environment().put(TestDatabase.URL_VARIABLE, TestDatabase.baseUrl());
    builder.environment().putAll(environment);
    return new ChildJvm(builder.start());
  }

  /** Waits for a line of output starting with {@code prefix}; returns it. */
  public String awaitLine(String prefix, Duration timeout) throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (true) {
      long left = deadline - System.nanoTime();
      String line = lines.poll(Math.max(left, 0), TimeUnit.NANOSECONDS);
      if (line == null) {
        throw new AssertionError(
            "Child JVM printed no line starting with '"
                + prefix
                + "' within "
                + timeout
                + "; alive="
                + process.isAlive()
                + ", output so far:\n"
                + output());
      }
      if (line.startsWith(prefix)) {
        return line;
      }
    }
  }

  /** Writes a line to the child's standard input. */
  public void send(String line) throws IOException {
    var in = process.getOutputStream();
    in.write((line + "\n").getBytes(StandardCharsets.UTF_8));
    in.flush();
  }

  /** Kills the JVM at once (SIGKILL): no shutdown hooks, no finally blocks, no commits. */
  public void kill() throws InterruptedException {
    process.destroyForcibly();
    process.waitFor(30, TimeUnit.SECONDS);
  }

  /**
   * Waits for the JVM to exit, and for its last lines to be read (a line printed just before the
   * exit may still be in the pipe when the process is gone); returns its exit code.
   */
  public int awaitExit(Duration timeout) throws InterruptedException {
    if (!process.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS)) {
      process.destroyForcibly();
      throw new AssertionError("Child JVM did not exit within " + timeout + ":\n" + output());
    }
    reader.join(TimeUnit.SECONDS.toMillis(5));
    return process.exitValue();
  }

  /** Completes once the JVM has exited, whatever ended it. */
  public CompletableFuture<Void> exited() {
    return process.onExit().thenApply(exited -> null);
  }

  /** Whether the JVM is still running (it may have halted itself at a fault point). */
  public boolean isAlive() {
    return process.isAlive();
  }

  public String output() {
    synchronized (output) {
      return String.join("\n", output);
    }
  }

  @Override
  public void close() throws InterruptedException {
    if (process.isAlive()) {
      kill();
    }
  }
}
