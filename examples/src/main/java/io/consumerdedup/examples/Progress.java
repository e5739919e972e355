package io.consumerdedup.examples;

import java.io.PrintStream;

/** One line per step while the demo runs, stamped with the seconds since it started. */
public final class Progress {
  private final PrintStream out;
  private final String prefix;
  private final long startNanos;

  private Progress(PrintStream out, String prefix, long startNanos) {
    this.out = out;
    this.prefix = prefix;
    this.startNanos = startNanos;
  }

  public static Progress to(PrintStream out) {
    return new Progress(out, "", System.nanoTime());
  }

  /** The same clock, with {@code scope} in front of every line, such as {@code [lost-ack] }. */
  public Progress scoped(String scope) {
    return new Progress(out, prefix + "[" + scope + "] ", startNanos);
  }

  public void step(String line) {
    double seconds = (System.nanoTime() - startNanos) / 1e9;
    synchronized (out) {
      out.printf("%6.1fs %s%s%n", seconds, prefix, line);
      out.flush();
    }
  }
}
