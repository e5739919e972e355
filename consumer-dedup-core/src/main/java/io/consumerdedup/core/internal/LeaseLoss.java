package io.consumerdedup.core.internal;

import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.util.Optional;
import org.jspecify.annotations.Nullable;

/**
 * What the key's record says about a lease its holder was refused: taken over by another consumer,
 * released by an operator (FAILED under the holder's own attempt, with the operator's note), given
 * back by a takeover that never ran (no loss: the holder's SUCCESS is still written), or gone. Read
 * once the store refused a renewal or a fenced outcome, so that the holder's warning and its {@link
 * io.consumerdedup.core.DedupLeaseLostException} tell what happened: after a release nobody holds
 * the key, and "the new holder decides" sent the reader looking for one.
 *
 * @param kind what the record says
 * @param releaseNote the note an operator's release left on the record, if released
 */
public record LeaseLoss(Kind kind, @Nullable String releaseNote) {

  /** The prefix of the note {@code DedupAdmin.release} writes into {@code last_error}. */
  public static final String RELEASE_NOTE_PREFIX = "Released by ";

  /** What a refused lease turned out to be. */
  public enum Kind {
    /** Another claim holds the key (a later attempt or another claim id). */
    TAKEN_OVER,
    /** An operator released the holder's attempt: FAILED, held by nobody. */
    RELEASED,
    /**
     * A claim that took over the holder's expired lease was given back unrun: FAILED under the
     * holder's attempt with the takeover's note ({@link TakeoverNote}), held by nobody. Nothing ran
     * the handler after the holder, whose SUCCESS is still written: no loss, unless a claim of the
     * key comes first.
     */
    GIVEN_BACK,
    /** No record at all: a failover, a DELETE, a purge. */
    VANISHED,
    /** The record could not be read: the usual meaning of a refusal is assumed. */
    UNREAD
  }

  /**
   * Reads the record of {@code claim}'s key. Never throws: an {@code Error} or a store failure here
   * must not keep the caller from settling the loss (a renewal that threw was not marked lost, and
   * its loss not reported, until a later tick).
   */
  public static LeaseLoss read(DedupStore store, ClaimResult.Claimed claim) {
    Optional<DedupRecord> found;
    try {
      found = store.find(claim.key());
    } catch (RuntimeException | Error e) {
      return new LeaseLoss(Kind.UNREAD, null);
    }
    if (found.isEmpty()) {
      return new LeaseLoss(Kind.VANISHED, null);
    }
    DedupRecord record = found.get();
    // Only a note of this attempt's release: one carried from an earlier attempt's (a claim keeps
    // the previous attempt's error until its outcome) says nothing of this one.
    Optional<String> note =
        record
            .lastError()
            .filter(LeaseLoss::isReleaseNote)
            .filter(text -> text.endsWith(releaseNoteEnd(claim.token())));
    if (record.status() == DedupStatus.FAILED
        && record.attempts() == claim.token()
        && note.isPresent()) {
      return new LeaseLoss(Kind.RELEASED, note.get());
    }
    if (record.status() == DedupStatus.FAILED
        && record.attempts() == claim.token()
        && TakeoverNote.isOf(record.lastError().orElse(null), claim.token(), claim.claimId())) {
      return new LeaseLoss(Kind.GIVEN_BACK, null);
    }
    return new LeaseLoss(Kind.TAKEN_OVER, null);
  }

  /** How the note of an operator's release of {@code attempt} ends: it names the attempt. */
  public static String releaseNoteEnd(int attempt) {
    return " (attempt " + attempt + ")";
  }

  /** Whether {@code lastError} is the note of an operator's release. */
  public static boolean isReleaseNote(String lastError) {
    return lastError.startsWith(RELEASE_NOTE_PREFIX);
  }
}
