package io.consumerdedup.core.internal;

import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Set;
import org.jspecify.annotations.Nullable;

/**
 * A failure's text for logs and dead-letter headers, even when the failure cannot give it: an
 * application's exception whose {@code toString()} or {@code getMessage()} throws (one that prints
 * a field it cannot read, an entity loaded lazily, a closed resource) must not turn the description
 * of a failure into a new failure, which ended the poll loop or made a written dead letter look
 * unwritten.
 */
public final class FailureTexts {
  private FailureTexts() {}

  /**
   * {@code failure.toString()}, or, if that throws, its class name and message (if it can give one)
   * followed by what the description threw.
   */
  public static String describe(Throwable failure) {
    try {
      return String.valueOf(failure.toString());
    } catch (RuntimeException | StackOverflowError e) {
      String message = messageOf(failure);
      return failure.getClass().getName()
          + (message == null ? "" : ": " + message)
          + " (its toString() threw "
          + e.getClass().getName()
          + ")";
    }
  }

  /**
   * {@code failure.getMessage()}, or, if that throws, a text saying so and naming what it threw.
   */
  public static @Nullable String messageOf(Throwable failure) {
    try {
      return failure.getMessage();
    } catch (RuntimeException | StackOverflowError e) {
      return "(its getMessage() threw " + e.getClass().getName() + ")";
    }
  }

  /**
   * {@code failure} to hand a logger as the exception of a line, or, if its {@code toString()} or
   * {@code getMessage()} throws, or that of one of its causes or suppressed exceptions, a stand-in
   * that prints {@link #describe} of each with its stack trace and causes: Logback prints an
   * exception that overrides {@code toString()} with it, its causes and suppressed ones as well,
   * and their throw came out of the log call itself. A printable exception wrapping an unprintable
   * cause is the common case (an application's exception around its persistence layer's).
   */
  public static Throwable loggable(Throwable failure) {
    if (printableThroughout(failure)) {
      return failure;
    }
    return standIn(failure, Collections.newSetFromMap(new IdentityHashMap<>()));
  }

  private static boolean printableThroughout(Throwable failure) {
    Set<Throwable> seen = Collections.newSetFromMap(new IdentityHashMap<>());
    for (Throwable current = failure;
        current != null && seen.add(current);
        current = current.getCause()) {
      if (!printable(current)) {
        return false;
      }
      for (Throwable suppressed : current.getSuppressed()) {
        if (!printable(suppressed)) {
          return false;
        }
      }
    }
    return true;
  }

  /** Each of the chain described (a printable one reads as it would), its suppressed ones left. */
  private static Throwable standIn(Throwable failure, Set<Throwable> seen) {
    seen.add(failure);
    Throwable cause = failure.getCause();
    // Given to the constructor: a cause given as null there cannot be set later (initCause threw).
    Unprintable standIn =
        new Unprintable(
            describe(failure),
            cause != null && !seen.contains(cause) ? standIn(cause, seen) : null);
    standIn.setStackTrace(failure.getStackTrace());
    return standIn;
  }

  /** Whether Logback can print it: it reads the message, and {@code toString()} when overridden. */
  @SuppressWarnings("ReturnValueIgnored") // called for what they throw
  private static boolean printable(Throwable failure) {
    try {
      failure.getMessage();
      return failure.toString() != null;
    } catch (RuntimeException | StackOverflowError e) {
      return false;
    }
  }

  /** Stands in for a failure that cannot describe itself, in a log line. */
  private static final class Unprintable extends RuntimeException {
    private static final long serialVersionUID = 1L;

    Unprintable(String description, @Nullable Throwable cause) {
      super(description, cause, false, true);
    }

    @Override
    public String toString() {
      return String.valueOf(getMessage());
    }
  }
}
