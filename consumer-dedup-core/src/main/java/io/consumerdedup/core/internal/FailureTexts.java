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
    } catch (RuntimeException | Error e) {
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
    } catch (RuntimeException | Error e) {
      // An OutOfMemoryError too (a message built from a payload too large for the heap): thrown
      // on, it left a handler's failure undescribed and so unrecorded, its claim ended with no
      // FAILED, and the caller heard it instead of the handler's exception.
      return "(its getMessage() threw " + e.getClass().getName() + ")";
    }
  }

  /**
   * {@code failure} to hand a logger as the exception of a line, or, if its {@code toString()} or
   * {@code getMessage()} throws, or those of one of its causes or suppressed exceptions, a stand-in
   * that prints {@link #describe} of each with its stack trace, causes and suppressed exceptions:
   * Logback prints each of them (it reads the message, and {@code toString()} when overridden), and
   * their throw came out of the log call itself. A printable exception whose cause is not (a
   * deserializer's exception, wrapped by kafka-clients) needs the stand-in too.
   */
  public static Throwable loggable(Throwable failure) {
    if (printable(failure, Collections.newSetFromMap(new IdentityHashMap<>()))) {
      return failure;
    }
    return standIn(failure, Collections.newSetFromMap(new IdentityHashMap<>()));
  }

  /** Whether Logback can print it, its causes and suppressed exceptions; each looked at once. */
  @SuppressWarnings("ReturnValueIgnored") // called for what they throw
  private static boolean printable(Throwable failure, Set<Throwable> seen) {
    if (!seen.add(failure)) {
      return true; // Logback prints a circular reference as such
    }
    try {
      failure.getMessage();
      if (failure.toString() == null) {
        return false;
      }
      Throwable cause = failure.getCause();
      if (cause != null && !printable(cause, seen)) {
        return false;
      }
      for (Throwable suppressed : failure.getSuppressed()) {
        if (!printable(suppressed, seen)) {
          return false;
        }
      }
      return true;
    } catch (RuntimeException | Error e) {
      return false;
    }
  }

  /** A printable copy of {@code failure} and what it carries; each is copied once. */
  private static Throwable standIn(Throwable failure, Set<Throwable> seen) {
    seen.add(failure);
    Throwable cause;
    try {
      cause = failure.getCause();
    } catch (RuntimeException | Error e) {
      cause = null;
    }
    // Given to the constructor: one constructed without a cause cannot take one later (initCause
    // throws "Can't overwrite cause").
    Unprintable standIn =
        new Unprintable(
            describe(failure),
            cause != null && !seen.contains(cause) ? standIn(cause, seen) : null);
    try {
      standIn.setStackTrace(failure.getStackTrace());
      for (Throwable suppressed : failure.getSuppressed()) {
        if (!seen.contains(suppressed)) {
          standIn.addSuppressed(standIn(suppressed, seen));
        }
      }
    } catch (RuntimeException | Error e) {
      // What could not be read is left out of the line; the failure's description is in it.
    }
    return standIn;
  }

  /** Stands in for a failure that cannot describe itself, in a log line. */
  private static final class Unprintable extends RuntimeException {
    private static final long serialVersionUID = 1L;

    Unprintable(String description, @Nullable Throwable cause) {
      super(description, cause, true, true);
    }

    @Override
    public String toString() {
      return String.valueOf(getMessage());
    }
  }
}
