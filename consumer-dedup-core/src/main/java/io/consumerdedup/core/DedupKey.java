package io.consumerdedup.core;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import org.jspecify.annotations.Nullable;

/**
 * The identity of one business action: a kind of action ({@code bizType}, such as {@code payment})
 * and the business data that identifies it ({@code bizKey}, such as an order number or an external
 * transaction id). Each consumer of one event should use its own {@code bizType}.
 *
 * <p>Use {@link #of(String, String)}: it validates both parts and hashes a long {@code bizKey}, so
 * that {@link #bizKey()} is always the form stored in the dedup table.
 *
 * @param bizType the kind of action, 1 to {@value #MAX_BIZ_TYPE_LENGTH} characters
 * @param bizKey the stored key: the business key itself, or {@code sha256:<hex>} of a key longer
 *     than {@value #MAX_BIZ_KEY_LENGTH} characters
 */
public record DedupKey(String bizType, String bizKey) {

  /** Longest {@code bizType}, in characters (the column is {@code varchar(64)}). */
  public static final int MAX_BIZ_TYPE_LENGTH = 64;

  /**
   * Longest {@code bizKey} stored as it is, in characters (the column is {@code varchar(256)});
   * longer keys are stored as {@value #HASH_PREFIX} followed by the hex SHA-256 of their UTF-8
   * bytes.
   */
  public static final int MAX_BIZ_KEY_LENGTH = 256;

  /** Prefix of a hashed {@code bizKey}. */
  public static final String HASH_PREFIX = "sha256:";

  /** Validates the parts as {@link #of(String, String)} does, without hashing. */
  public DedupKey {
    requireValidBizType(bizType);
    requireValid("bizKey", bizKey);
    if (codePoints(bizKey) > MAX_BIZ_KEY_LENGTH) {
      throw new IllegalArgumentException(
          "bizKey is longer than "
              + MAX_BIZ_KEY_LENGTH
              + " characters; build the key with DedupKey.of(...), which stores a long key as its"
              + " SHA-256 hash");
    }
  }

  /**
   * Builds a key.
   *
   * @param bizType the kind of action, such as {@code payment}; at most {@value
   *     #MAX_BIZ_TYPE_LENGTH} characters
   * @param bizKey the business key, such as an order number; a key longer than {@value
   *     #MAX_BIZ_KEY_LENGTH} characters is replaced by {@code sha256:} and the hex digest of its
   *     UTF-8 bytes, never truncated
   * @throws IllegalArgumentException if a part is null, blank, contains a NUL or other control
   *     character or an unpaired surrogate, or {@code bizType} is too long; the message names the
   *     part
   */
  public static DedupKey of(@Nullable String bizType, @Nullable String bizKey) {
    String type = requireValid("bizType", bizType);
    String key = requireValid("bizKey", bizKey);
    String stored = codePoints(key) > MAX_BIZ_KEY_LENGTH ? HASH_PREFIX + sha256Hex(key) : key;
    return new DedupKey(type, stored);
  }

  /** Whether {@link #bizKey()} is the hash of a long business key rather than the key itself. */
  public boolean isHashed() {
    return isHashedForm(bizKey);
  }

  /**
   * Whether {@code bizKey} has the form a key over {@value #MAX_BIZ_KEY_LENGTH} characters is
   * stored in: {@value #HASH_PREFIX} and 64 lowercase hex digits. {@link #of(String, String)} keeps
   * such a key as it is, as the stored form of a long key (how an operator names one); a business
   * key of that form cannot be told from the long key it would be the hash of, so the Kafka
   * adapters refuse it as malformed, and an application that builds keys from its own data should
   * refuse it too.
   */
  public static boolean isHashedForm(String bizKey) {
    if (bizKey.length() != HASH_PREFIX.length() + 64 || !bizKey.startsWith(HASH_PREFIX)) {
      return false;
    }
    for (int i = HASH_PREFIX.length(); i < bizKey.length(); i++) {
      char c = bizKey.charAt(i);
      if (!(c >= '0' && c <= '9' || c >= 'a' && c <= 'f')) {
        return false;
      }
    }
    return true;
  }

  @Override
  public String toString() {
    return bizType + "/" + abbreviate(bizKey);
  }

  /**
   * {@code bizType} if it can be the type of a key, as {@link #of(String, String)} checks it; for
   * what names a type alone, such as a filter by type.
   *
   * @throws IllegalArgumentException naming {@code bizType} and what is wrong with it
   */
  static String requireValidBizType(@Nullable String bizType) {
    String type = requireValid("bizType", bizType);
    if (codePoints(type) > MAX_BIZ_TYPE_LENGTH) {
      throw new IllegalArgumentException(
          "bizType is longer than "
              + MAX_BIZ_TYPE_LENGTH
              + " characters ("
              + codePoints(type)
              + "): "
              + abbreviate(type));
    }
    return type;
  }

  /** {@code value} if it can be part of a key. */
  private static String requireValid(String field, @Nullable String value) {
    if (value == null) {
      throw new IllegalArgumentException(field + " must not be null");
    }
    if (value.isBlank()) {
      throw new IllegalArgumentException(field + " must not be blank");
    }
    for (int i = 0; i < value.length(); i++) {
      char c = value.charAt(i);
      if (c == '\0') {
        throw new IllegalArgumentException(
            field + " must not contain a NUL character (at index " + i + ")");
      }
      if (Character.isISOControl(c)) {
        throw new IllegalArgumentException(
            field
                + " must not contain control characters (U+"
                + String.format("%04X", (int) c)
                + " at index "
                + i
                + ")");
      }
      if (Character.isSurrogate(c)) {
        boolean paired =
            Character.isHighSurrogate(c)
                && i + 1 < value.length()
                && Character.isLowSurrogate(value.charAt(i + 1));
        if (!paired) {
          throw new IllegalArgumentException(
              field + " must be valid text: unpaired surrogate at index " + i);
        }
        i++;
      }
    }
    return value;
  }

  private static int codePoints(String value) {
    return value.codePointCount(0, value.length());
  }

  private static String sha256Hex(String value) {
    try {
      MessageDigest digest = MessageDigest.getInstance("SHA-256");
      return HexFormat.of().formatHex(digest.digest(value.getBytes(StandardCharsets.UTF_8)));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("SHA-256 is required of every Java platform", e);
    }
  }

  private static String abbreviate(String value) {
    return value.length() <= 80 ? value : value.substring(0, 77) + "...";
  }
}
