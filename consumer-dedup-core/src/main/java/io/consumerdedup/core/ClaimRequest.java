package io.consumerdedup.core;

import java.time.Duration;
import java.util.HexFormat;
import java.util.Objects;
import java.util.concurrent.ThreadLocalRandom;
import org.jspecify.annotations.Nullable;

/**
 * One claim of a key, as the executor asks a {@link DedupStore} for it.
 *
 * @param key the business key
 * @param owner the consumer instance that will hold the lease
 * @param lease how long the claim holds the key before another consumer may take it over
 * @param retention how long an abandoned claim is kept before the purge may delete it
 * @param fingerprint the payload fingerprint, or null when the executor does not compare payloads
 * @param source where the delivery came from (such as {@code payments-0@42}), or null
 * @param claimId identifies this claim, so that a claim that is sent again (its first reply was
 *     lost after the server committed it) is recognised as the caller's own instead of as another
 *     holder's live lease; unique per claim, 1 to 64 characters, ASCII letters, digits, {@code -},
 *     {@code _} and {@code .} only (another claim's takeover note names it, and no id may read as a
 *     part of that text)
 */
public record ClaimRequest(
    DedupKey key,
    String owner,
    Duration lease,
    Duration retention,
    @Nullable String fingerprint,
    @Nullable String source,
    String claimId) {

  public ClaimRequest {
    Objects.requireNonNull(key, "key");
    Objects.requireNonNull(owner, "owner");
    Objects.requireNonNull(lease, "lease");
    Objects.requireNonNull(retention, "retention");
    Objects.requireNonNull(claimId, "claimId");
    if (claimId.isEmpty() || claimId.length() > 64) {
      throw new IllegalArgumentException(
          "claimId must be 1 to 64 characters, was " + claimId.length());
    }
    for (int i = 0; i < claimId.length(); i++) {
      char c = claimId.charAt(i);
      if (!isClaimIdCharacter(c)) {
        // The code point, not the character: the id may be hostile text (a line break, a note).
        throw new IllegalArgumentException(
            "claimId may hold only ASCII letters, digits, '-', '_' and '.', but has U+%04X at index %d"
                .formatted((int) c, i));
      }
    }
  }

  private static boolean isClaimIdCharacter(char c) {
    return (c >= 'a' && c <= 'z')
        || (c >= 'A' && c <= 'Z')
        || (c >= '0' && c <= '9')
        || c == '-'
        || c == '_'
        || c == '.';
  }

  /** A request with a fresh claim id. */
  public ClaimRequest(
      DedupKey key,
      String owner,
      Duration lease,
      Duration retention,
      @Nullable String fingerprint,
      @Nullable String source) {
    this(key, owner, lease, retention, fingerprint, source, newClaimId());
  }

  /** 128 random bits in hex: unique among the claims that can meet on one key. */
  public static String newClaimId() {
    ThreadLocalRandom random = ThreadLocalRandom.current();
    return HexFormat.of().toHexDigits(random.nextLong())
        + HexFormat.of().toHexDigits(random.nextLong());
  }
}
