package io.consumerdedup.core.internal;

import java.util.Objects;
import org.jspecify.annotations.Nullable;

/**
 * The note a claim writes into {@code last_error} when it takes over a PROCESSING record whose
 * lease ran out: "Lease of attempt 1 (claim 9f…) ran out, held by consumer-a; taken over", followed
 * by " | " and the error the record held before (an earlier attempt's failure), cut to {@link
 * StoredText#MAX_ERROR_LENGTH}. A claim given back unrun (released) restores the record as FAILED
 * under that attempt and keeps the note, which is how the record tells a takeover given back from
 * the attempt's own FAILED: the holder of that claim, whose handler may still be running, then
 * writes its SUCCESS, as nothing ran the handler after it. The note names the claim, not only its
 * attempt: after a record vanished under its holder, another claim of the key starts at attempt 1
 * again, and only the claim id tells the two holders apart. A SUCCESS clears the note, and a FAILED
 * or an operator's release overwrites it. One text for every store: the SQL dialects build it from
 * these parts.
 */
public final class TakeoverNote {
  /** What the note starts with, before the attempt whose lease ran out. */
  public static final String BEFORE_ATTEMPT = "Lease of attempt ";

  /** Between the attempt and the id of the claim that held it. */
  public static final String BEFORE_CLAIM = " (claim ";

  /** Between the claim id and the owner that held it. */
  public static final String BEFORE_OWNER = ") ran out, held by ";

  /** What the note ends with. */
  public static final String END = "; taken over";

  /** Between the note and the error the record held before it. */
  public static final String BEFORE_PREVIOUS_ERROR = " | ";

  private TakeoverNote() {}

  /**
   * The note of a takeover of the expired lease of {@code claimId} (attempt {@code attempt}), which
   * {@code owner} held, keeping {@code previousError} after it; cut to the stored maximum.
   */
  public static String of(
      int attempt, String claimId, String owner, @Nullable String previousError) {
    String note = prefix(attempt, claimId) + owner + END;
    return Objects.requireNonNull(
        StoredText.storable(
            previousError == null ? note : note + BEFORE_PREVIOUS_ERROR + previousError,
            StoredText.MAX_ERROR_LENGTH));
  }

  /** How the note of a takeover of {@code claimId}'s lease (attempt {@code attempt}) starts. */
  public static String prefix(int attempt, String claimId) {
    return BEFORE_ATTEMPT + attempt + BEFORE_CLAIM + claimId + BEFORE_OWNER;
  }

  /**
   * Whether {@code lastError} is the note of a takeover of the lease of {@code claimId}, attempt
   * {@code attempt}.
   */
  public static boolean isOf(@Nullable String lastError, int attempt, String claimId) {
    return lastError != null && lastError.startsWith(prefix(attempt, claimId));
  }

  /**
   * The error a handler reported, behind the notes of takeovers that {@code lastError} starts with,
   * or {@code lastError} itself if it holds notes only: a dead letter shows the failure, not how
   * leases changed hands.
   */
  public static String handlerError(String lastError) {
    String text = lastError;
    while (text.startsWith(BEFORE_ATTEMPT) && text.contains(BEFORE_OWNER)) {
      int end = text.indexOf(END + BEFORE_PREVIOUS_ERROR);
      if (end < 0) {
        return lastError;
      }
      text = text.substring(end + END.length() + BEFORE_PREVIOUS_ERROR.length());
    }
    return text;
  }
}
