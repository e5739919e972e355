package io.consumerdedup.core.internal;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import java.time.Instant;
import java.util.Optional;
import org.junit.jupiter.api.Test;

/**
 * What a holder refused its lease is told about its key's record: an operator's release only when
 * the operator released its own attempt. A claim keeps the error of the attempt before it until its
 * own outcome, so the note of an earlier attempt's release can sit on a FAILED record of a later
 * attempt (a takeover given back by a version that wrote no note of it).
 */
class LeaseLossTest {
  private static final DedupKey KEY = DedupKey.of("lease-loss", "ORD-1");
  private static final String RELEASE_OF_ATTEMPT_1 =
      "Released by ops at 2026-12-07T10:00:00Z while held by consumer-a (attempt 1)";

  @Test
  void aReleaseOfTheHoldersOwnAttemptIsReportedWithItsNote() {
    LeaseLoss loss = LeaseLoss.read(storeHolding(failed(1, RELEASE_OF_ATTEMPT_1)), holder(1));

    assertThat(loss.kind()).isEqualTo(LeaseLoss.Kind.RELEASED);
    assertThat(loss.releaseNote()).isEqualTo(RELEASE_OF_ATTEMPT_1);
  }

  @Test
  void theNoteOfAnEarlierAttemptsReleaseIsNoReleaseOfTheHolder() {
    LeaseLoss loss = LeaseLoss.read(storeHolding(failed(2, RELEASE_OF_ATTEMPT_1)), holder(2));

    assertThat(loss.kind()).as("what attempt 2 is told").isEqualTo(LeaseLoss.Kind.TAKEN_OVER);
    assertThat(loss.releaseNote()).as("the note it quotes").isNull();
  }

  @Test
  void aTakeoverOfTheHoldersAttemptGivenBackIsNoLoss() {
    ClaimResult.Claimed holder = holder(1);
    String note = TakeoverNote.of(1, holder.claimId(), "consumer-a", "bank down");

    assertThat(LeaseLoss.read(storeHolding(failed(1, note)), holder).kind())
        .as("what attempt 1 is told")
        .isEqualTo(LeaseLoss.Kind.GIVEN_BACK);
    assertThat(LeaseLoss.read(storeHolding(failed(1, note)), holder(1)).kind())
        .as("what another claim of attempt 1 is told (the key claimed anew after a purge)")
        .isEqualTo(LeaseLoss.Kind.TAKEN_OVER);
    assertThat(LeaseLoss.read(storeHolding(failed(2, note)), holder(2)).kind())
        .as("what attempt 2 is told of a note of attempt 1")
        .isEqualTo(LeaseLoss.Kind.TAKEN_OVER);
  }

  private static ClaimResult.Claimed holder(int token) {
    return new ClaimResult.Claimed(KEY, token, ClaimRequest.newClaimId());
  }

  private static DedupRecord failed(int attempts, String lastError) {
    Instant now = Instant.now();
    return new DedupRecord(
        KEY,
        DedupStatus.FAILED,
        attempts,
        "consumer-b",
        null,
        null,
        lastError,
        "orders-0@7",
        now,
        now,
        now.plus(Duration.ofDays(1)),
        false);
  }

  /** A store whose only answer is {@code record}, the record the holder's key has. */
  private static DedupStore storeHolding(DedupRecord record) {
    return new DedupStore() {
      @Override
      public Optional<DedupRecord> find(DedupKey key) {
        return Optional.of(record);
      }

      @Override
      public ClaimResult claim(ClaimRequest request) {
        throw new UnsupportedOperationException();
      }

      @Override
      public ClaimResult claimInTransaction(ClaimRequest request) {
        throw new UnsupportedOperationException();
      }

      @Override
      public boolean complete(ClaimResult.Claimed claim, Duration retention) {
        throw new UnsupportedOperationException();
      }

      @Override
      public boolean fail(ClaimResult.Claimed claim, String error, Duration retention) {
        throw new UnsupportedOperationException();
      }

      @Override
      public boolean renew(ClaimResult.Claimed claim, Duration lease) {
        throw new UnsupportedOperationException();
      }

      @Override
      public int purge(int limit) {
        throw new UnsupportedOperationException();
      }

      @Override
      public boolean release(ClaimResult.Claimed claim) {
        throw new UnsupportedOperationException();
      }
    };
  }
}
