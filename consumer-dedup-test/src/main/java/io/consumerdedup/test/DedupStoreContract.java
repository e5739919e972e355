package io.consumerdedup.test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.internal.StoredText;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Test;

/**
 * What every {@link DedupStore} must do, as JUnit 5 tests: extend it for a store of your own (or to
 * check a database your application runs on), give it the store, and say how time passes. (One file
 * on purpose, over 500 lines: a user extends one class and gets every rule, one test each.)
 *
 * <pre>{@code
 * class MyDedupStoreContractTest extends DedupStoreContract {
 *   private static final MyDedupStore store = new MyDedupStore(...);
 *
 *   protected DedupStore store() { return store; }
 * }
 * }</pre>
 *
 * <p>The store may be shared by all the tests of the class, or be fresh for each: each test uses
 * keys of its own {@code bizType}. Tests that need a lease to run out claim with {@link
 * #shortLease()} and then call {@link #letTimePass(Duration)}, which sleeps by default (right for a
 * store on a database's clock); a store on an injectable clock advances it instead ({@link
 * TestClock}).
 *
 * <p>Leaves out {@link DedupStore#claimInTransaction}, which needs the store's own transactions.
 */
public abstract class DedupStoreContract {

  /** The lease of claims that stay live throughout a test. */
  protected static final Duration LONG_LEASE = Duration.ofMinutes(10);

  /** How long records are kept after their outcome, unless a test purges them. */
  protected static final Duration RETENTION = Duration.ofDays(1);

  /** The biz type of this test's keys: no other test (or run) meets them. */
  private final String bizType =
      "contract-" + UUID.randomUUID().toString().substring(0, 8).toLowerCase(Locale.ROOT);

  /** The store under test; may be the same instance for every test. */
  protected abstract DedupStore store();

  /** A lease a test waits out: short, so the test is quick. Default one second. */
  protected Duration shortLease() {
    return Duration.ofSeconds(1);
  }

  /**
   * Lets {@code duration} pass by the store's clock. Default: sleeps. A store with an injectable
   * clock advances it instead.
   */
  protected void letTimePass(Duration duration) throws InterruptedException {
    Thread.sleep(duration.toMillis());
  }

  /** How many threads race for one key in the race test. Default 16. */
  protected int racingThreads() {
    return 16;
  }

  // --- one key ---

  @Test
  void aNewKeyIsClaimedWithTokenOneAndRecordedAsProcessingUnderALiveLease() {
    DedupKey key = key("new");

    ClaimResult.Claimed claim = claimed(store().claim(request(key, "consumer-a")));

    assertEquals(1, claim.token(), "token of a new key");
    DedupRecord record = find(key);
    assertEquals(DedupStatus.PROCESSING, record.status());
    assertEquals(1, record.attempts());
    assertEquals("consumer-a", record.owner());
    assertTrue(record.isLeaseLive(), "lease of a fresh claim is live");
    assertEquals("orders-0@1", record.source().orElse(null));
  }

  @Test
  void aSucceededKeyIsADuplicateForEveryLaterClaim() {
    DedupKey key = key("done");
    ClaimResult.Claimed claim = claimed(store().claim(request(key, "consumer-a")));
    assertTrue(store().complete(claim, RETENTION), "complete by the holder");

    for (String other : List.of("consumer-b", "consumer-a")) {
      DedupRecord existing = taken(store().claim(request(key, other)));
      assertEquals(DedupStatus.SUCCESS, existing.status());
      assertEquals(1, existing.attempts(), "a duplicate is not an attempt");
      assertEquals("consumer-a", existing.owner());
      assertFalse(existing.isLeaseLive());
    }
  }

  @Test
  void aLiveLeaseKeepsOthersOut() {
    DedupKey key = key("live");
    claimed(store().claim(request(key, "consumer-a")));

    DedupRecord existing = taken(store().claim(request(key, "consumer-b")));

    assertEquals(DedupStatus.PROCESSING, existing.status());
    assertTrue(existing.isLeaseLive(), "the holder's lease is live");
    assertEquals("consumer-a", existing.owner());
    assertEquals(1, find(key).attempts(), "a refused claim is not an attempt");
  }

  @Test
  void anExpiredLeaseIsTakenOverWithTheNextToken() throws InterruptedException {
    DedupKey key = key("expired");
    claimed(store().claim(request(key, "crashed", shortLease(), null)));
    waitOutShortLease();
    assertFalse(find(key).isLeaseLive(), "lease after it ran out");

    ClaimResult.Claimed takeover = claimed(store().claim(request(key, "consumer-b")));

    assertEquals(2, takeover.token(), "token of the takeover");
    DedupRecord record = find(key);
    assertEquals(DedupStatus.PROCESSING, record.status());
    assertEquals(2, record.attempts());
    assertEquals("consumer-b", record.owner());
    assertTrue(record.isLeaseLive());
  }

  @Test
  void aFailedKeyIsRetriedWithTheNextTokenAndItsErrorIsKept() {
    DedupKey key = key("failed");
    ClaimResult.Claimed first = claimed(store().claim(request(key, "consumer-a")));
    assertTrue(store().fail(first, "java.io.IOException: bank timeout", RETENTION));
    DedupRecord failed = find(key);
    assertEquals(DedupStatus.FAILED, failed.status());
    assertFalse(failed.isLeaseLive());
    assertEquals("java.io.IOException: bank timeout", failed.lastError().orElse(null));

    ClaimResult.Claimed retry = claimed(store().claim(request(key, "consumer-b")));

    assertEquals(2, retry.token(), "token of the retry");
    DedupRecord record = find(key);
    assertEquals(DedupStatus.PROCESSING, record.status());
    assertEquals(2, record.attempts());
    assertEquals("consumer-b", record.owner());
    assertTrue(store().complete(retry, RETENTION));
    assertEquals(DedupStatus.SUCCESS, find(key).status());
  }

  @Test
  void aKeyThatFailedOnceThenSucceededShowsNoLastError() {
    DedupKey single = key("failed-then-done");
    DedupKey batched = key("failed-then-done-batch");
    for (DedupKey key : List.of(single, batched)) {
      assertTrue(store().fail(claimOne(key), "bank timeout", RETENTION));
    }
    ClaimResult.Claimed retry = claimOne(single);
    assertEquals(
        "bank timeout",
        find(single).lastError().orElse(null),
        "while retried, the error is the previous attempt's");

    assertTrue(store().complete(retry, RETENTION));
    assertEquals(List.of(), store().completeAll(List.of(claimOne(batched)), RETENTION));

    for (DedupKey key : List.of(single, batched)) {
      DedupRecord record = find(key);
      assertEquals(DedupStatus.SUCCESS, record.status());
      assertEquals(2, record.attempts());
      assertEquals(null, record.lastError().orElse(null), "last error of " + key);
    }
  }

  @Test
  void aHolderWhoseLeaseWasTakenOverIsRefusedOnCompleteFailAndRenew() throws InterruptedException {
    DedupKey key = key("zombie");
    ClaimResult.Claimed zombie = claimed(store().claim(request(key, "zombie", shortLease(), null)));
    waitOutShortLease();
    ClaimResult.Claimed takeover = claimed(store().claim(request(key, "consumer-b")));

    assertFalse(store().complete(zombie, RETENTION), "zombie's late SUCCESS");
    assertFalse(store().fail(zombie, "late", RETENTION), "zombie's late FAILED");
    assertFalse(store().renew(zombie, LONG_LEASE), "zombie's renewal");
    assertFalse(store().release(zombie), "zombie's release");

    DedupRecord record = find(key);
    assertEquals(DedupStatus.PROCESSING, record.status(), "the new holder's claim is untouched");
    assertEquals("consumer-b", record.owner());
    assertEquals(takeover.token(), record.attempts());
    assertTrue(record.isLeaseLive());
    assertTrue(store().complete(takeover, RETENTION), "the new holder completes");
    assertEquals(DedupStatus.SUCCESS, find(key).status());
  }

  @Test
  void aHolderPastItsLeaseButNotTakenOverMayStillComplete() throws InterruptedException {
    DedupKey key = key("late");
    ClaimResult.Claimed claim = claimed(store().claim(request(key, "slow", shortLease(), null)));
    waitOutShortLease();

    assertTrue(store().complete(claim, RETENTION));
    assertEquals(DedupStatus.SUCCESS, find(key).status());
  }

  @Test
  void aRenewedLeaseOutlivesItsFirstEnd() throws InterruptedException {
    DedupKey key = key("renewed");
    ClaimResult.Claimed claim =
        claimed(store().claim(request(key, "consumer-a", shortLease(), null)));

    assertTrue(store().renew(claim, LONG_LEASE), "renew by the holder");
    waitOutShortLease();

    assertTrue(find(key).isLeaseLive(), "lease after the claim's lease would have ended");
    assertEquals("consumer-a", taken(store().claim(request(key, "consumer-b"))).owner());
    assertFalse(store().renew(another(claim, claim.token() + 1), LONG_LEASE), "another token");
    assertFalse(store().renew(another(claim, claim.token()), LONG_LEASE), "another claim id");
  }

  @Test
  void aCompletionSentAgainCountsAsWrittenButNoOtherClaimOrOutcomeGetsIn() {
    DedupKey key = key("complete-twice");
    ClaimResult.Claimed claim = claimed(store().claim(request(key, "consumer-a")));
    assertTrue(store().complete(claim, RETENTION));

    assertTrue(store().complete(claim, RETENTION), "the same completion again");
    assertFalse(store().fail(claim, "late", RETENTION), "FAILED after SUCCESS");
    assertFalse(store().renew(claim, LONG_LEASE), "renewal after SUCCESS");
    assertFalse(store().complete(another(claim, claim.token() + 1), RETENTION), "another token");
    assertFalse(store().complete(another(claim, claim.token()), RETENTION), "another claim id");
    assertEquals(DedupStatus.SUCCESS, find(key).status());
  }

  @Test
  void aFailureSentAgainCountsAsWrittenButCannotTurnIntoSuccess() {
    DedupKey key = key("fail-twice");
    ClaimResult.Claimed claim = claimed(store().claim(request(key, "consumer-a")));
    assertTrue(store().fail(claim, "bank down", RETENTION));

    assertTrue(store().fail(claim, "bank down", RETENTION), "the same failure again");
    assertFalse(store().fail(another(claim, claim.token()), "late", RETENTION), "another claim id");
    assertFalse(store().complete(claim, RETENTION), "SUCCESS after FAILED");
    assertEquals(DedupStatus.FAILED, find(key).status());
  }

  @Test
  void aClaimSentAgainWithItsOwnIdIsRecognisedAsItsOwn() {
    DedupKey key = key("claim-twice");
    ClaimRequest request = request(key, "consumer-a");
    ClaimResult.Claimed first = claimed(store().claim(request));

    ClaimResult.Claimed again = claimed(store().claim(request));

    assertEquals(first.token(), again.token(), "the same claim, not a new attempt");
    assertEquals(1, find(key).attempts());
    DedupRecord other = taken(store().claim(request(key, "consumer-a")));
    assertTrue(other.isLeaseLive(), "another claim of the same owner is refused");
  }

  @Test
  void aClaimRecognisedAsItsOwnHoldsTheKeyForAWholeLeaseFromThen() throws InterruptedException {
    DedupKey key = key("claim-again-late");
    ClaimRequest request = request(key, "consumer-a", shortLease(), null);
    Duration mostOfTheLease = shortLease().multipliedBy(7).dividedBy(10);
    ClaimResult.Claimed first = claimed(store().claim(request));
    letTimePass(mostOfTheLease);

    ClaimResult.Claimed again = claimed(store().claim(request));
    letTimePass(mostOfTheLease); // past the end of the first lease, within the renewed one

    assertEquals(first.token(), again.token(), "the same claim, not a new attempt");
    assertTrue(find(key).isLeaseLive(), "the lease runs from the claim sent again");
    DedupRecord other = taken(store().claim(request(key, "consumer-b")));
    assertEquals("consumer-a", other.owner(), "another consumer cannot take the key over");
  }

  @Test
  void aClaimSentAgainCountsItsLeaseAndRetentionFromThenButNeverShortensThem()
      throws InterruptedException {
    DedupKey key = key("claim-again-times");
    ClaimRequest request = request(key, "consumer-a");
    claimed(store().claim(request));
    DedupRecord first = find(key);
    letTimePass(Duration.ofMillis(300));

    claimed(store().claim(request));
    DedupRecord again = find(key);
    // Sent again, the claim is the one the caller counts from now: its record is kept as one made
    // now would be, a lease and the retention from now.
    assertTrue(
        again.leaseUntil().orElseThrow().isAfter(first.leaseUntil().orElseThrow()),
        "the lease runs from the claim sent again: " + first + " then " + again);
    assertTrue(
        again.expiresAt().isAfter(first.expiresAt()),
        "the retention runs from the claim sent again: " + first + " then " + again);

    // A copy that carries a shorter lease or retention (another setting, a restart in between)
    // may not cut them short: the caller may be counting on the longer lease.
    ClaimRequest shorter =
        new ClaimRequest(
            key,
            "consumer-a",
            shortLease(),
            Duration.ofSeconds(1),
            null,
            "orders-0@1",
            request.claimId());
    claimed(store().claim(shorter));
    DedupRecord last = find(key);
    assertEquals(again.leaseUntil(), last.leaseUntil(), "lease after a shorter copy of the claim");
    assertEquals(again.expiresAt(), last.expiresAt(), "retention after a shorter copy");
    waitOutShortLease();
    assertEquals(
        "consumer-a",
        taken(store().claim(request(key, "consumer-b"))).owner(),
        "another consumer takes the key over while its holder's lease runs");
  }

  @Test
  void aClaimIdSentWithAnotherPayloadIsAConflictNotTheClaimItNamed() {
    // A process sends an unanswered claim's id again with the next claim of the key, which may be
    // another payload: taken as the claim, that payload would run under the first one's record,
    // and the first payload, delivered again, would be skipped as its duplicate.
    DedupKey key = key("claim-id-other-payload");
    ClaimRequest first = request(key, "consumer-a", LONG_LEASE, "fp-1");
    claimed(store().claim(first));
    ClaimRequest other =
        new ClaimRequest(
            key, "consumer-a", LONG_LEASE, RETENTION, "fp-2", "orders-0@2", first.claimId());

    DedupRecord refused = taken(store().claim(other));

    assertEquals("fp-1", refused.fingerprint().orElse(null), "the payload the key was claimed for");
    assertEquals(1, find(key).attempts());
  }

  @Test
  void aClaimSentAgainAfterItsLeaseRanOutIsStillItsOwnUntilTakenOver() throws InterruptedException {
    DedupKey key = key("claim-again-expired");
    ClaimRequest request = request(key, "consumer-a", shortLease(), null);
    ClaimResult.Claimed first = claimed(store().claim(request));
    waitOutShortLease();

    ClaimResult.Claimed again = claimed(store().claim(request));

    assertEquals(first.token(), again.token(), "the same claim, not a takeover");
    DedupRecord record = find(key);
    assertEquals(1, record.attempts(), "attempts after the claim sent again");
    assertTrue(record.isLeaseLive(), "the lease runs from the claim sent again");
    assertEquals("consumer-a", taken(store().claim(request(key, "consumer-b"))).owner());
  }

  @Test
  void anAbandonedClaimIsNotTakenOverByAnotherPayload() throws InterruptedException {
    DedupKey key = key("abandoned-fingerprint");
    claimed(store().claim(request(key, "crashed", shortLease(), "fp-amount-10")));
    waitOutShortLease();

    DedupRecord conflict =
        taken(store().claim(request(key, "consumer-b", LONG_LEASE, "fp-amount-99")));

    assertEquals(DedupStatus.PROCESSING, conflict.status());
    assertFalse(conflict.isLeaseLive(), "the abandoned lease");
    assertEquals("fp-amount-10", conflict.fingerprint().orElse(null));
    assertEquals(1, find(key).attempts(), "a conflict is not an attempt");
    ClaimResult.Claimed takeover =
        claimed(store().claim(request(key, "consumer-c", LONG_LEASE, "fp-amount-10")));
    assertEquals(2, takeover.token(), "the same payload takes the abandoned claim over");
  }

  /**
   * A claim that took over an expired lease and was given back unrun (released) leaves the key to
   * the holder it took it from, which may still be running its handler: nothing ran the handler
   * after it, so its SUCCESS is written, and the key is a duplicate from then on.
   */
  @Test
  void aTakeoverGivenBackLeavesTheKeyToTheHolderItWasTakenFromWhoseSuccessIsWritten()
      throws InterruptedException {
    DedupKey key = key("release-takeover");
    ClaimResult.Claimed abandoned =
        claimed(store().claim(request(key, "slow", shortLease(), null)));
    waitOutShortLease();
    takeOverAndGiveBack(key);

    assertEquals(1, find(key).attempts(), "the released takeover is not an attempt");
    assertFalse(find(key).isLeaseLive(), "no lease after the release");
    assertTrue(store().complete(abandoned, RETENTION), "the slow holder's late SUCCESS");
    DedupRecord record = find(key);
    assertEquals(DedupStatus.SUCCESS, record.status());
    assertEquals(1, record.attempts(), "the slow holder's attempt");
    assertEquals(null, record.lastError().orElse(null), "last error after the SUCCESS");
    assertEquals(DedupStatus.SUCCESS, taken(store().claim(request(key, "consumer-c"))).status());
    assertTrue(store().complete(abandoned, RETENTION), "its SUCCESS sent again, reply lost");
  }

  @Test
  void aClaimAfterATakeoverWasGivenBackRefusesTheHolderItWasTakenFrom()
      throws InterruptedException {
    DedupKey key = key("given-back-claimed");
    ClaimResult.Claimed abandoned =
        claimed(store().claim(request(key, "slow", shortLease(), null)));
    waitOutShortLease();
    takeOverAndGiveBack(key);
    ClaimResult.Claimed next = claimed(store().claim(request(key, "consumer-c")));
    assertEquals(2, next.token(), "the next claim takes the released token");

    assertFalse(store().complete(abandoned, RETENTION), "the slow holder's late SUCCESS");
    assertFalse(store().fail(abandoned, "late", RETENTION), "the slow holder's late FAILED");
    assertFalse(store().renew(abandoned, LONG_LEASE), "the slow holder's renewal");
    DedupRecord record = find(key);
    assertEquals(DedupStatus.PROCESSING, record.status(), "the new holder's claim is untouched");
    assertEquals("consumer-c", record.owner());
    assertTrue(store().complete(next, RETENTION));
    assertEquals(DedupStatus.SUCCESS, find(key).status());
  }

  @Test
  void twoClaimsGivenBackInTurnStillLeaveTheKeyToTheHolderTheFirstTookItFrom()
      throws InterruptedException {
    DedupKey key = key("given-back-twice");
    ClaimResult.Claimed abandoned =
        claimed(store().claim(request(key, "slow", shortLease(), null)));
    waitOutShortLease();
    takeOverAndGiveBack(key);
    // A claim of the FAILED key that the give-back restored, given back in turn.
    ClaimResult.Claimed next = claimed(store().claim(request(key, "consumer-c")));
    assertTrue(store().release(next), "release of the next claim");

    assertTrue(store().complete(abandoned, RETENTION), "the slow holder's late SUCCESS");
    assertEquals(DedupStatus.SUCCESS, find(key).status());
    assertEquals(1, find(key).attempts());
  }

  /**
   * The record of a key vanished under its holder (a purge, an operator forgetting the key), the
   * key was claimed anew under the same attempt 1, and that claim's lease was taken over and given
   * back: the key is the new claim's, whose SUCCESS is written, not the first holder's.
   */
  @Test
  void aTakeoverGivenBackLeavesTheKeyToTheClaimItTookNotToAnEarlierClaimOfTheSameAttempt()
      throws InterruptedException {
    DedupKey key = key("given-back-claimed-anew");
    ClaimResult.Claimed first = claimed(store().claim(vanishing(key)));
    waitOutShortLease();
    while (store().purge(100) > 0) {
      // Other tests sharing the store may have expired records too.
    }
    assertTrue(store().find(key).isEmpty(), "the first holder's record vanished");
    ClaimResult.Claimed anew = claimed(store().claim(request(key, "z", shortLease(), null)));
    assertEquals(1, anew.token(), "claimed anew: attempt 1 again");
    waitOutShortLease();
    takeOverAndGiveBack(key);

    assertFalse(store().complete(first, RETENTION), "the first holder's late SUCCESS");
    assertTrue(store().complete(anew, RETENTION), "the SUCCESS of the claim taken over");
    DedupRecord record = find(key);
    assertEquals(DedupStatus.SUCCESS, record.status());
    assertEquals(1, record.attempts());
  }

  /**
   * A takeover notes whose lease it took before the error the record held (an earlier attempt's
   * failure), which a give-back keeps: the admin view and a dead letter still show the failure.
   */
  @Test
  void aTakeoverKeepsThePreviousAttemptsErrorAfterItsNote() throws InterruptedException {
    DedupKey key = key("takeover-keeps-error");
    DedupKey longError = key("takeover-keeps-long-error");
    assertTrue(store().fail(claimOne(key), "bank down", RETENTION), "attempt 1 failed");
    assertTrue(store().fail(claimOne(longError), "e".repeat(2_500), RETENTION));
    ClaimResult.Claimed killed = claimed(store().claim(request(key, "slow", shortLease(), null)));
    ClaimResult.Claimed killedLong =
        claimed(store().claim(request(longError, "slow", shortLease(), null)));
    waitOutShortLease();
    takeOverAndGiveBack(key, 3);
    takeOverAndGiveBack(longError, 3);

    String note = "Lease of attempt 2 (claim " + killed.claimId() + ") ran out, held by slow;";
    assertEquals(
        note + " taken over | bank down",
        find(key).lastError().orElse(null),
        "last error after a takeover given back");
    String longNote = find(longError).lastError().orElse("");
    assertEquals(
        StoredText.MAX_ERROR_LENGTH, longNote.length(), "a long error kept after the note, cut");
    assertTrue(
        longNote.startsWith(
            "Lease of attempt 2 (claim " + killedLong.claimId() + ") ran out, held by slow;"),
        "the note before a long error: " + longNote.substring(0, 100));
    assertTrue(store().complete(killed, RETENTION), "the holder taken over still completes");
  }

  @Test
  void aTakeoverThatFailedLeavesTheKeyToTheNextDeliveryNotToTheHolderItWasTakenFrom()
      throws InterruptedException {
    DedupKey key = key("takeover-failed");
    ClaimResult.Claimed abandoned =
        claimed(store().claim(request(key, "slow", shortLease(), null)));
    waitOutShortLease();
    ClaimResult.Claimed takeover = claimOne(key);
    assertTrue(store().fail(takeover, "bank down", RETENTION), "the takeover's handler failed");
    ClaimResult.Claimed next = claimed(store().claim(request(key, "consumer-c")));
    assertTrue(store().release(next), "release of the next claim");

    assertFalse(store().complete(abandoned, RETENTION), "the slow holder's late SUCCESS");
    DedupRecord record = find(key);
    assertEquals(DedupStatus.FAILED, record.status());
    assertEquals(takeover.token(), record.attempts(), "the failed takeover's attempt");
    assertEquals("bank down", record.lastError().orElse(null));
  }

  @Test
  void holdersWhoseTakeoversWereGivenBackCompleteInABatchAndWithTheNextClaim()
      throws InterruptedException {
    DedupKey batched = key("given-back-batch");
    DedupKey carried = key("given-back-carried");
    DedupKey other = key("given-back-other");
    ClaimResult.Claimed batchedHolder =
        claimed(store().claim(request(batched, "slow", shortLease(), null)));
    ClaimResult.Claimed carriedHolder =
        claimed(store().claim(request(carried, "slow", shortLease(), null)));
    ClaimResult.Claimed otherHolder = claimOne(other);
    waitOutShortLease();
    takeOverAndGiveBack(batched);
    takeOverAndGiveBack(carried);

    assertEquals(
        List.of(),
        store().completeAll(List.of(batchedHolder, otherHolder), RETENTION),
        "completeAll: keys whose lease was lost");
    DedupStore.ClaimCompleting next =
        store()
            .claimCompleting(
                request(key("given-back-next"), "slow"), List.of(carriedHolder), RETENTION);
    claimed(next.claim());
    assertEquals(List.of(), next.leaseLost(), "claimCompleting: marks whose lease was lost");
    for (DedupKey key : List.of(batched, carried, other)) {
      assertEquals(DedupStatus.SUCCESS, find(key).status(), "status of " + key);
      assertEquals(1, find(key).attempts(), "attempt of " + key);
    }
  }

  @Test
  void aLongErrorAndSourceAreKeptAsATextColumnHoldsThem() {
    DedupKey key = key("long-texts");
    // 60 times 7 characters: the 300th is the first half of a surrogate pair.
    String source = "topic\uD83D\uDCB3".repeat(60);
    ClaimResult.Claimed claim =
        claimed(
            store()
                .claim(new ClaimRequest(key, "consumer-a", LONG_LEASE, RETENTION, null, source)));
    String error =
        "java.io.IOException: bank said \u0000 about card \uD83D\uDCB3 " + "e".repeat(2_500);

    assertTrue(store().fail(claim, error, RETENTION));

    DedupRecord record = find(key);
    assertEquals(
        StoredText.storable(error, StoredText.MAX_ERROR_LENGTH),
        record.lastError().orElse(null),
        "the error: at most 2000 characters, a NUL written as \\0");
    assertEquals(
        StoredText.storable(source, StoredText.MAX_SOURCE_LENGTH),
        record.source().orElse(null),
        "the source: at most 300 characters, no surrogate pair split");
  }

  @Test
  void aDifferentFingerprintIsRefusedEvenAfterFailureAndTheSameOneIsRetried() {
    DedupKey key = key("fingerprint");
    ClaimResult.Claimed first =
        claimed(store().claim(request(key, "consumer-a", LONG_LEASE, "fp-amount-10")));
    assertTrue(store().fail(first, "boom", RETENTION));

    DedupRecord conflict =
        taken(store().claim(request(key, "consumer-b", LONG_LEASE, "fp-amount-99")));
    assertEquals(DedupStatus.FAILED, conflict.status());
    assertEquals("fp-amount-10", conflict.fingerprint().orElse(null));
    assertEquals(1, find(key).attempts(), "a conflict is not an attempt");

    ClaimResult.Claimed retry =
        claimed(store().claim(request(key, "consumer-b", LONG_LEASE, "fp-amount-10")));
    assertEquals(2, retry.token());
    assertTrue(store().complete(retry, RETENTION));
    DedupRecord afterSuccess =
        taken(store().claim(request(key, "consumer-c", LONG_LEASE, "fp-amount-99")));
    assertEquals(DedupStatus.SUCCESS, afterSuccess.status());
  }

  @Test
  void aClaimWithoutAFingerprintIsNotAConflictAndTheFirstFingerprintStays() {
    DedupKey key = key("no-fingerprint");
    ClaimResult.Claimed first = claimed(store().claim(request(key, "consumer-a")));
    assertTrue(store().fail(first, "boom", RETENTION));

    ClaimResult.Claimed retry =
        claimed(store().claim(request(key, "consumer-b", LONG_LEASE, "fp-1")));
    assertTrue(store().fail(retry, "boom", RETENTION));
    ClaimResult.Claimed third = claimed(store().claim(request(key, "consumer-c")));

    assertEquals(3, third.token());
    assertEquals("fp-1", find(key).fingerprint().orElse(null), "the first fingerprint given");
  }

  // --- batches ---

  @Test
  void aBatchAnswersEachDistinctKeyOnceInFirstSeenOrder() throws InterruptedException {
    DedupKey done = key("b-done");
    assertTrue(store().complete(claimOne(done), RETENTION));
    DedupKey held = key("b-held");
    claimOne(held);
    DedupKey failed = key("b-failed");
    assertTrue(store().fail(claimOne(failed), "boom", RETENTION));
    DedupKey expired = key("b-expired");
    claimed(store().claim(request(expired, "crashed", shortLease(), null)));
    DedupKey otherPayload = key("b-other-payload");
    ClaimResult.Claimed withPrint =
        claimed(store().claim(request(otherPayload, "consumer-a", LONG_LEASE, "fp-1")));
    assertTrue(store().fail(withPrint, "boom", RETENTION));
    DedupKey fresh = key("b-new");
    waitOutShortLease();

    List<ClaimResult> results =
        store()
            .claimAll(
                List.of(
                    request(fresh, "consumer-b"),
                    request(done, "consumer-b"),
                    request(held, "consumer-b"),
                    request(fresh, "consumer-b"), // a later copy in the same batch
                    request(failed, "consumer-b"),
                    request(expired, "consumer-b"),
                    request(otherPayload, "consumer-b", LONG_LEASE, "fp-2")));

    assertEquals(
        List.of(fresh, done, held, failed, expired, otherPayload),
        results.stream().map(ClaimResult::key).toList(),
        "one answer per distinct key, in first-seen order");
    assertEquals(1, claimed(results.get(0)).token(), "new key");
    assertEquals(DedupStatus.SUCCESS, taken(results.get(1)).status(), "succeeded key");
    assertTrue(taken(results.get(2)).isLeaseLive(), "live lease");
    assertEquals(2, claimed(results.get(3)).token(), "retry after FAILED");
    assertEquals(2, claimed(results.get(4)).token(), "takeover of an expired lease");
    assertEquals("fp-1", taken(results.get(5)).fingerprint().orElse(null), "other payload");
    assertEquals(1, find(fresh).attempts(), "the later copy was not claimed again");
    assertEquals(List.of(), store().claimAll(List.of()), "an empty batch");
  }

  @Test
  void batchOutcomesAnswerTheKeysTheirClaimsNoLongerHold() throws InterruptedException {
    List<DedupKey> keys = IntStream.range(0, 4).mapToObj(i -> key("fenced-" + i)).toList();
    List<ClaimResult.Claimed> claims = new ArrayList<>();
    for (ClaimResult result :
        store()
            .claimAll(
                List.of(
                    request(keys.get(0), "consumer-a"),
                    request(keys.get(1), "consumer-a"),
                    request(keys.get(2), "consumer-a"),
                    request(keys.get(3), "consumer-a", shortLease(), null)))) {
      claims.add(claimed(result));
    }
    waitOutShortLease();
    ClaimResult.Claimed takeover = claimOne(keys.get(3));

    assertEquals(List.of(keys.get(3)), store().renewAll(claims, LONG_LEASE), "renewAll");
    assertEquals(List.of(), store().completeAll(claims.subList(0, 2), RETENTION), "completeAll");
    assertEquals(
        List.of(keys.get(3)),
        store()
            .failAll(
                List.of(
                    new DedupStore.Failure(claims.get(2), "boom"),
                    new DedupStore.Failure(claims.get(3), "late")),
                RETENTION),
        "failAll");
    assertEquals(
        List.of(), store().completeAll(claims.subList(0, 2), RETENTION), "completeAll again");

    assertEquals(DedupStatus.SUCCESS, find(keys.get(0)).status());
    assertEquals(DedupStatus.SUCCESS, find(keys.get(1)).status());
    DedupRecord failed = find(keys.get(2));
    assertEquals(DedupStatus.FAILED, failed.status());
    assertEquals("boom", failed.lastError().orElse(null));
    DedupRecord takenOver = find(keys.get(3));
    assertEquals(DedupStatus.PROCESSING, takenOver.status(), "the takeover is untouched");
    assertEquals(takeover.token(), takenOver.attempts());
  }

  @Test
  void aClaimCompletingMarksTheHeldClaimsWhateverItsClaimAnswers() throws InterruptedException {
    DedupKey previous = key("cc-previous");
    DedupKey takenOver = key("cc-taken-over");
    DedupKey next = key("cc-next");
    DedupKey done = key("cc-done");
    ClaimResult.Claimed previousClaim = claimOne(previous);
    ClaimResult.Claimed stale =
        claimed(store().claim(request(takenOver, "zombie", shortLease(), null)));
    assertTrue(store().complete(claimOne(done), RETENTION));
    waitOutShortLease();
    ClaimResult.Claimed takeover = claimOne(takenOver);
    ClaimRequest nextRequest = request(next, "consumer-a");

    DedupStore.ClaimCompleting first =
        store().claimCompleting(nextRequest, List.of(previousClaim, stale), RETENTION);

    ClaimResult.Claimed nextClaim = claimed(first.claim());
    assertEquals(1, nextClaim.token(), "the claim of a new key");
    assertEquals(List.of(takenOver), first.leaseLost(), "the mark whose lease was taken over");
    assertEquals(DedupStatus.SUCCESS, find(previous).status());
    DedupRecord untouched = find(takenOver);
    assertEquals(DedupStatus.PROCESSING, untouched.status(), "the new holder's claim is untouched");
    assertEquals(takeover.token(), untouched.attempts());

    // Sent again, its reply lost: the marks count as written, the claim is recognised as its own.
    DedupStore.ClaimCompleting again =
        store().claimCompleting(nextRequest, List.of(previousClaim, stale), RETENTION);
    assertEquals(nextClaim.token(), claimed(again.claim()).token(), "the same claim");
    assertEquals(List.of(takenOver), again.leaseLost());
    assertEquals(1, find(next).attempts());

    // A claim that meets a duplicate still writes the marks.
    DedupStore.ClaimCompleting duplicate =
        store().claimCompleting(request(done, "consumer-a"), List.of(nextClaim), RETENTION);
    assertEquals(DedupStatus.SUCCESS, taken(duplicate.claim()).status());
    assertEquals(List.of(), duplicate.leaseLost());
    assertEquals(DedupStatus.SUCCESS, find(next).status());
  }

  @Test
  void aReleasedClaimLeavesTheKeyAsIfItHadNotHappened() {
    DedupKey fresh = key("release-new");
    DedupKey retried = key("release-retried");
    ClaimResult.Claimed firstTry = claimOne(retried);
    assertTrue(store().fail(firstTry, "first try failed", RETENTION));
    List<ClaimResult.Claimed> claims = new ArrayList<>();
    for (ClaimResult result :
        store().claimAll(List.of(request(fresh, "consumer-a"), request(retried, "consumer-a")))) {
      claims.add(claimed(result));
    }
    assertEquals(2, claims.get(1).token());

    assertEquals(List.of(), store().releaseAll(claims), "releaseAll");

    assertTrue(store().find(fresh).isEmpty(), "a key the claim created is gone");
    DedupRecord restored = find(retried);
    assertEquals(DedupStatus.FAILED, restored.status());
    assertEquals(1, restored.attempts(), "the released claim is not an attempt");
    assertEquals("first try failed", restored.lastError().orElse(null));
    assertTrue(
        store().fail(firstTry, "first try failed", RETENTION),
        "the first try's FAILED, sent again after its reply was lost, is still its own");

    // Released again (its first reply lost) after another consumer claimed the key: the later
    // claim is untouched.
    ClaimResult.Claimed next = claimOne(retried);
    assertEquals(2, next.token(), "the next claim takes the released token");
    assertEquals(List.of(fresh, retried), store().releaseAll(claims), "releaseAll again");
    assertFalse(store().release(claims.get(1)), "release again");
    DedupRecord reclaimed = find(retried);
    assertEquals(DedupStatus.PROCESSING, reclaimed.status());
    assertTrue(reclaimed.isLeaseLive());
    assertEquals(1, claimOne(fresh).token(), "a released new key is new again");
  }

  @Test
  void aCompletedClaimCannotBeReleased() {
    DedupKey key = key("release-done");
    ClaimResult.Claimed claim = claimOne(key);
    assertTrue(store().complete(claim, RETENTION));

    assertFalse(store().release(claim));
    assertEquals(DedupStatus.SUCCESS, find(key).status());
  }

  // --- retention ---

  @Test
  void purgeDeletesRecordsPastTheirRetentionButNeverALiveLease() throws InterruptedException {
    List<DedupKey> old = IntStream.range(0, 3).mapToObj(i -> key("old-" + i)).toList();
    for (DedupKey key : old) {
      assertTrue(store().complete(claimOne(key), Duration.ofMillis(1)));
    }
    DedupKey kept = key("kept");
    assertTrue(store().complete(claimOne(kept), RETENTION));
    DedupKey running = key("running");
    ClaimResult.Claimed runningClaim =
        claimed(
            store()
                .claim(
                    new ClaimRequest(
                        running, "consumer-a", shortLease(), Duration.ofMillis(1), null, null)));
    // Its retention ends with the claim's lease; the renewed lease outlives it.
    assertTrue(store().renew(runningClaim, LONG_LEASE));
    waitOutShortLease();

    assertEquals(2, store().purge(2), "the first purge deletes up to its limit");
    while (store().purge(100) > 0) {
      // Other tests sharing the store may have expired records too.
    }

    old.forEach(key -> assertTrue(store().find(key).isEmpty(), key + " is purged"));
    assertTrue(store().find(kept).isPresent(), "a record within its retention is kept");
    assertTrue(store().find(running).isPresent(), "a live lease past its retention is kept");
    assertThrows(IllegalArgumentException.class, () -> store().purge(0));
  }

  @Test
  void anOutcomeWhoseRecordVanishedIsWrittenAgainButAKeyClaimedAnewStaysItsNewHolders()
      throws InterruptedException {
    // Records that vanish under their holders, as after a failover to a standby that had not
    // received them: claimed under a lease that runs out with their retention, then purged.
    DedupKey done = key("vanished-done");
    DedupKey failed = key("vanished-failed");
    DedupKey reclaimed = key("vanished-reclaimed");
    DedupKey sameToken = key("vanished-same-token");
    assertTrue(store().fail(claimOne(reclaimed), "first try", RETENTION));
    ClaimResult.Claimed doneClaim = claimed(store().claim(vanishing(done)));
    ClaimResult.Claimed failedClaim = claimed(store().claim(vanishing(failed)));
    ClaimResult.Claimed zombie = claimed(store().claim(vanishing(reclaimed)));
    assertEquals(2, zombie.token());
    ClaimResult.Claimed sameTokenZombie = claimed(store().claim(vanishing(sameToken)));
    waitOutShortLease();
    while (store().purge(100) > 0) {
      // Other tests sharing the store may have expired records too.
    }
    for (DedupKey key : List.of(done, failed, reclaimed, sameToken)) {
      assertTrue(store().find(key).isEmpty(), key + " vanished");
    }
    ClaimResult.Claimed newHolder = claimOne(reclaimed);
    assertEquals(1, newHolder.token(), "a vanished key is claimed as a new one");
    ClaimResult.Claimed sameTokenHolder = claimOne(sameToken);
    assertEquals(sameTokenZombie.token(), sameTokenHolder.token(), "claimed anew: token 1 again");

    assertFalse(store().renew(doneClaim, LONG_LEASE), "a renewal finds no record");
    assertTrue(store().complete(doneClaim, RETENTION), "SUCCESS written again");
    assertTrue(store().fail(failedClaim, "bank down", RETENTION), "FAILED again");
    assertFalse(store().complete(zombie, RETENTION), "over a new holder");
    // The token alone cannot tell the zombie from the new holder: its claim id does.
    assertFalse(
        store().fail(sameTokenZombie, "late", RETENTION), "FAILED over a new holder, same token");
    assertFalse(
        store().complete(sameTokenZombie, RETENTION), "SUCCESS over a new holder, same token");
    assertFalse(store().renew(sameTokenZombie, LONG_LEASE), "renewal of a new holder, same token");

    DedupRecord success = find(done);
    assertEquals(DedupStatus.SUCCESS, success.status());
    assertEquals(doneClaim.token(), success.attempts(), "written under the holder's attempt");
    assertEquals(
        DedupStatus.SUCCESS,
        taken(store().claim(request(done, "consumer-b"))).status(),
        "a redelivery is a duplicate");
    assertTrue(store().complete(doneClaim, RETENTION), "the same completion again");
    assertFalse(
        store().complete(another(doneClaim, doneClaim.token()), RETENTION),
        "SUCCESS written again is its claim's, not its token's");
    DedupRecord failure = find(failed);
    assertEquals(DedupStatus.FAILED, failure.status());
    assertEquals("bank down", failure.lastError().orElse(null));
    assertTrue(store().fail(failedClaim, "bank down", RETENTION), "the same failure again");
    assertEquals(
        failedClaim.token() + 1,
        claimed(store().claim(request(failed, "consumer-b"))).token(),
        "a redelivery retries it with the next token");
    DedupRecord newClaim = find(reclaimed);
    assertEquals(DedupStatus.PROCESSING, newClaim.status(), "the new holder's claim is untouched");
    assertEquals("consumer-a", newClaim.owner());
    assertTrue(store().complete(newHolder, RETENTION), "the new holder's");
    DedupRecord sameTokenClaim = find(sameToken);
    assertEquals(DedupStatus.PROCESSING, sameTokenClaim.status(), "untouched, same token");
    assertEquals("consumer-a", sameTokenClaim.owner());
    assertTrue(store().complete(sameTokenHolder, RETENTION), "the new holder's, same token");
    assertEquals(DedupStatus.SUCCESS, find(sameToken).status());
  }

  /** A claim whose record the purge may delete as soon as its short lease has run out. */
  private ClaimRequest vanishing(DedupKey key) {
    return new ClaimRequest(key, "holder", shortLease(), Duration.ofMillis(1), null, "orders-0@9");
  }

  // --- keys ---

  @Test
  void hostileKeysAreStoredAndFoundExactlyAsGiven() {
    List<String> hostile =
        List.of(
            "'; DROP TABLE consumer_dedup; --",
            "x' OR '1'='1",
            "\"quoted\" and `ticked`",
            "back\\slash\\",
            "100%_wild*card?",
            "order \uD83D\uDCB3 \uD83D\uDE80 \u4E2D\u6587",
            "  leading and trailing spaces  ",
            "\u00A0non-breaking\u2028line-separator");
    for (String text : hostile) {
      DedupKey key = DedupKey.of(bizType, text);
      assertEquals(text, key.bizKey(), "a short key is stored as given");
      ClaimResult.Claimed claim = claimed(store().claim(request(key, "consumer-a")));
      assertTrue(store().complete(claim, RETENTION), text);
      DedupRecord record = find(key);
      assertEquals(key, record.key(), text);
      assertEquals(DedupStatus.SUCCESS, record.status(), text);
      assertEquals(DedupStatus.SUCCESS, taken(store().claim(request(key, "consumer-b"))).status());
    }
    DedupKey prefix = DedupKey.of(bizType, "x'");
    assertEquals(1, claimOne(prefix).token(), "a prefix of a stored key is another key");
    DedupKey otherCase = DedupKey.of(bizType, "BACK\\SLASH\\");
    assertEquals(1, claimOne(otherCase).token(), "keys are case-sensitive");
  }

  @Test
  void keysThatDifferOnlyInTrailingSpacesCaseOrNormalisationAreDistinctInOneBatch() {
    String card = "\uD83D\uDCB3"; // four bytes in UTF-8
    List<DedupKey> keys =
        List.of(
            key("A"),
            key("A "),
            key("A  "),
            key("a"),
            key("\u00E9"), // é, composed
            key("e\u0301"), // é, decomposed
            DedupKey.of(bizType, card.repeat(DedupKey.MAX_BIZ_KEY_LENGTH)),
            DedupKey.of(bizType, card.repeat(DedupKey.MAX_BIZ_KEY_LENGTH - 1) + "x"),
            DedupKey.of(
                bizType + card.repeat(DedupKey.MAX_BIZ_TYPE_LENGTH - bizType.length()), "A"));
    assertFalse(keys.get(6).isHashed(), "a key of the maximum length is stored as given");
    List<ClaimRequest> batch = new ArrayList<>();
    keys.forEach(k -> batch.add(request(k, "consumer-a")));
    batch.add(request(key("A "), "consumer-a")); // a later copy in the same batch

    List<ClaimResult> results = store().claimAll(batch);

    assertEquals(keys, results.stream().map(ClaimResult::key).toList(), "one answer per key");
    for (ClaimResult result : results) {
      // One key taken for another would drop the other's record as a duplicate.
      assertEquals(1, claimed(result).token(), "claim of " + result.key());
      assertTrue(store().complete(claimed(result), RETENTION), "completion of " + result.key());
      assertEquals(result.key(), find(result.key()).key(), "the record found for its key");
    }
    for (DedupKey k : keys) {
      assertEquals(DedupStatus.SUCCESS, taken(store().claim(request(k, "consumer-b"))).status());
    }
  }

  @Test
  void fingerprintsThatDifferOnlyInTrailingSpacesOrCaseAreDifferentPayloads() {
    DedupKey key = key("fingerprint-spaces");
    ClaimResult.Claimed claim =
        claimed(store().claim(request(key, "consumer-a", LONG_LEASE, "fp")));
    assertTrue(store().fail(claim, "boom", RETENTION));

    for (String other : List.of("fp ", "fp  ", "FP")) {
      DedupRecord refused = taken(store().claim(request(key, "consumer-b", LONG_LEASE, other)));
      assertEquals("fp", refused.fingerprint().orElse(null), "payload " + other + " against fp");
    }
    assertEquals(2, claimed(store().claim(request(key, "consumer-b", LONG_LEASE, "fp"))).token());
  }

  @Test
  void keysWithNulOrControlCharactersAreRefusedBeforeTheyReachTheStore() {
    for (String text : List.of("nul\u0000inside", "tab\tinside", "line\nbreak", "\uD800alone")) {
      IllegalArgumentException refused =
          assertThrows(IllegalArgumentException.class, () -> DedupKey.of(bizType, text));
      String message = String.valueOf(refused.getMessage());
      assertTrue(message.startsWith("bizKey"), message);
    }
  }

  @Test
  void aVeryLongKeyIsStoredAsItsHashAndStaysDistinct() {
    String longText = "k".repeat(9_999);
    DedupKey first = DedupKey.of(bizType, longText + "1");
    DedupKey second = DedupKey.of(bizType, longText + "2");
    assertTrue(first.isHashed(), "a 10,000-character key is hashed");
    assertTrue(first.bizKey().length() <= DedupKey.MAX_BIZ_KEY_LENGTH);
    assertNotEquals(first.bizKey(), second.bizKey());

    ClaimResult.Claimed claim = claimOne(first);
    assertTrue(store().complete(claim, RETENTION));

    assertEquals(DedupStatus.SUCCESS, taken(store().claim(request(first, "b"))).status());
    assertEquals(
        DedupStatus.SUCCESS,
        taken(store().claim(request(DedupKey.of(bizType, longText + "1"), "c"))).status(),
        "the same long key, built again");
    assertEquals(1, claimOne(second).token(), "a long key differing in its last character");
  }

  // --- races ---

  @Test
  void manyThreadsRacingForOneKeyGetExactlyOneClaim() throws Exception {
    int threads = racingThreads();
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    try {
      for (int round = 0; round < 5; round++) {
        DedupKey key = key("race-" + round);
        CountDownLatch start = new CountDownLatch(1);
        List<Future<ClaimResult>> answers = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
          ClaimRequest request = request(key, "racer-" + i);
          answers.add(
              pool.submit(
                  () -> {
                    start.await();
                    return store().claim(request);
                  }));
        }
        start.countDown();
        int claims = 0;
        for (Future<ClaimResult> answer : answers) {
          if (answer.get(30, TimeUnit.SECONDS) instanceof ClaimResult.Claimed) {
            claims++;
          }
        }
        assertEquals(1, claims, "claims of " + key + " among " + threads + " racing threads");
        assertEquals(1, find(key).attempts(), "attempts of " + key);
      }
    } finally {
      pool.shutdownNow();
    }
  }

  // --- helpers for subclasses and the tests above ---

  /** A key of this test: {@code name} under a biz type no other test uses. */
  protected DedupKey key(String name) {
    return DedupKey.of(bizType, name);
  }

  /** A claim under {@link #LONG_LEASE}, without fingerprint. */
  protected ClaimRequest request(DedupKey key, String owner) {
    return request(key, owner, LONG_LEASE, null);
  }

  protected ClaimRequest request(
      DedupKey key, String owner, Duration lease, @Nullable String fingerprint) {
    return new ClaimRequest(key, owner, lease, RETENTION, fingerprint, "orders-0@1");
  }

  private ClaimResult.Claimed claimOne(DedupKey key) {
    return claimed(store().claim(request(key, "consumer-a")));
  }

  /**
   * Another consumer's claim of {@code key}, whose lease has run out, given back unrun (its
   * partition revoked, its poll cut short).
   */
  private void takeOverAndGiveBack(DedupKey key) {
    takeOverAndGiveBack(key, 2);
  }

  private void takeOverAndGiveBack(DedupKey key, int token) {
    ClaimResult.Claimed takeover =
        claimed(store().claimAll(List.of(request(key, "consumer-b"))).get(0));
    assertEquals(token, takeover.token(), "the takeover's token");
    assertEquals(List.of(), store().releaseAll(List.of(takeover)), "release of the takeover");
  }

  private DedupRecord find(DedupKey key) {
    return store().find(key).orElseThrow(() -> new AssertionError("no record of " + key));
  }

  private void waitOutShortLease() throws InterruptedException {
    // A margin over the lease: a database clock and the JVM's may tick a little apart.
    letTimePass(shortLease().plusMillis(300));
  }

  /** A claim of {@code claim}'s key under {@code token} by another request than {@code claim}'s. */
  private static ClaimResult.Claimed another(ClaimResult.Claimed claim, int token) {
    return new ClaimResult.Claimed(claim.key(), token, ClaimRequest.newClaimId());
  }

  private static ClaimResult.Claimed claimed(ClaimResult result) {
    return assertInstanceOf(ClaimResult.Claimed.class, result, "claim of " + result.key());
  }

  private static DedupRecord taken(ClaimResult result) {
    return assertInstanceOf(ClaimResult.Taken.class, result, "claim of " + result.key()).existing();
  }
}
