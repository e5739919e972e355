package io.consumerdedup.core;

import java.util.Optional;
import org.jspecify.annotations.Nullable;

/**
 * The root of consumer-dedup's exceptions. Each names the key it concerns and, when the call came
 * from a Kafka adapter, where the delivery came from ({@code topic-partition@offset}, and the
 * group).
 *
 * <p>Each kind of exception says what an adapter should do with the delivery: {@link
 * #disposition()}.
 */
public abstract class DedupException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final String reason;
  private final @Nullable DedupKey key;
  private final @Nullable String source;

  /**
   * @param reason what happened; the message appends the key and the source
   */
  public DedupException(
      String reason, @Nullable DedupKey key, @Nullable String source, @Nullable Throwable cause) {
    super(reason + describe(key, source), cause);
    this.reason = reason;
    this.key = key;
    this.source = source;
  }

  /** What an adapter does with the delivery that raised this: retry it later, dead-letter it... */
  public abstract Disposition disposition();

  /** What happened, without the key and source that {@link #getMessage()} appends. */
  public String reason() {
    return reason;
  }

  /** The key concerned, when there is one (a missing key has none). */
  public Optional<DedupKey> key() {
    return Optional.ofNullable(key);
  }

  /** Where the delivery came from, such as {@code payments-0@42 (group billing)}. */
  public Optional<String> source() {
    return Optional.ofNullable(source);
  }

  private static String describe(@Nullable DedupKey key, @Nullable String source) {
    StringBuilder text = new StringBuilder();
    if (key != null) {
      text.append(" [key ").append(key).append(']');
    }
    if (source != null) {
      text.append(" [from ").append(source).append(']');
    }
    return text.toString();
  }
}
