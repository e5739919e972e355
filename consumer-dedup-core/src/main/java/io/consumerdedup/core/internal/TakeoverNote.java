package io.consumerdedup.core.internal;

import org.jspecify.annotations.Nullable;

/**
 * The note a claim writes into {@code last_error} when it takes over a PROCESSING record whose
 * lease ran out: "Lease of attempt 1 ran out, held by consumer-a; taken over". A claim given back
 * unrun (released) restores the record as FAILED under that attempt and keeps the note, which is
 * how the record tells a takeover given back from the attempt's own FAILED: the holder of that
 * attempt, whose handler may still be running, then writes its SUCCESS, as nothing ran the handler
 * after it. A SUCCESS clears the note, and a FAILED or an operator's release overwrites it. One
 * text for every store: the SQL dialects build it from these parts.
 */
public final class TakeoverNote {
  /** What the note starts with, before the attempt whose lease ran out. */
  public static final String BEFORE_ATTEMPT = "Lease of attempt ";

  /** Between the attempt and the owner that held it. */
  public static final String BEFORE_OWNER = " ran out, held by ";

  /** What the note ends with. */
  public static final String END = "; taken over";

  private TakeoverNote() {}

  /** The note of a takeover of {@code attempt}'s expired lease, which {@code owner} held. */
  public static String of(int attempt, String owner) {
    return BEFORE_ATTEMPT + attempt + BEFORE_OWNER + owner + END;
  }

  /** Whether {@code lastError} is the note of a takeover of {@code attempt}'s lease. */
  public static boolean isOf(@Nullable String lastError, int attempt) {
    return lastError != null
        && lastError.startsWith(BEFORE_ATTEMPT + attempt + BEFORE_OWNER)
        && lastError.endsWith(END);
  }
}
