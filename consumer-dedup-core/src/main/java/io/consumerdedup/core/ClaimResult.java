package io.consumerdedup.core;

/**
 * The answer of {@link DedupStore#claim(ClaimRequest)}: the key was claimed, or it is held or done.
 */
public sealed interface ClaimResult permits ClaimResult.Claimed, ClaimResult.Taken {

  DedupKey key();

  /**
   * The caller now holds the key: a new key, a retry after FAILED, or a takeover of an expired
   * lease.
   *
   * @param token the fencing token (the record's attempts)
   * @param claimId the id of the request that claimed it ({@link ClaimRequest#claimId()}): with the
   *     token, it is what complete, fail, renew and release present, since a key claimed anew after
   *     its record vanished starts again at token 1
   */
  record Claimed(DedupKey key, int token, String claimId) implements ClaimResult {}

  /**
   * The key was not claimed; {@code existing} is the record that stopped it (SUCCESS, a live lease,
   * a different payload fingerprint, or a status this version does not know: {@link
   * DedupStatus#UNKNOWN}).
   */
  record Taken(DedupKey key, DedupRecord existing) implements ClaimResult {}
}
