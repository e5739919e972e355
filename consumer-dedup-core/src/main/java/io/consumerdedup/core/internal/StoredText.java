package io.consumerdedup.core.internal;

import org.jspecify.annotations.Nullable;

/**
 * How a store keeps the free text of a record (the delivery's source, the last error): one rule for
 * every store, so the in-memory one answers what the JDBC one would.
 */
public final class StoredText {
  /** Longest stored source, in characters. */
  public static final int MAX_SOURCE_LENGTH = 300;

  /** Longest stored error, in characters. */
  public static final int MAX_ERROR_LENGTH = 2000;

  /**
   * The owner of a record whose outcome was written again because the record had vanished under its
   * holder (a failover to a standby that had not received it, a DELETE, a purge): the holder is not
   * known to the statement that writes it.
   */
  public static final String VANISHED_OWNER = "unknown (record vanished, outcome written again)";

  private StoredText() {}

  /**
   * {@code value} as a text column can hold it: at most {@code max} characters, without NUL (which
   * PostgreSQL text refuses, and which an exception message may well contain; written as {@code
   * \0}), never splitting a surrogate pair.
   */
  public static @Nullable String storable(@Nullable String value, int max) {
    if (value == null) {
      return null;
    }
    String text = value.indexOf('\u0000') < 0 ? value : value.replace("\u0000", "\\0");
    return cut(text, max);
  }

  /**
   * {@code text} cut to at most {@code max} characters at a code point's boundary. A cut between
   * the two halves of a surrogate pair (an emoji) leaves an unpaired surrogate, which UTF-8 cannot
   * encode: Java's encoder writes it as {@code ?}, and a store or a dead-letter header showed a
   * character the failure never said.
   */
  public static String cut(String text, int max) {
    if (text.length() <= max) {
      return text;
    }
    int end = max;
    if (end > 0 && Character.isHighSurrogate(text.charAt(end - 1))) {
      end--;
    }
    return text.substring(0, end);
  }
}
