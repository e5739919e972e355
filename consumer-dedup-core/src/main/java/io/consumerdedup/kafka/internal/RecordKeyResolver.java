package io.consumerdedup.kafka.internal;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupKeyMalformedException;
import io.consumerdedup.core.DedupKeyMissingException;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.internal.OwnerIds;
import io.consumerdedup.core.internal.StoredText;
import io.consumerdedup.kafka.KeyExtractor;
import io.consumerdedup.kafka.MissingKeyPolicy;
import java.util.LinkedHashSet;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Turns a record into its {@link DedupKey}: extracts the business key, applies the {@link
 * MissingKeyPolicy}, and validates the key. {@link IdempotentRecordHandler} uses it, and so can an
 * adapter that claims keys itself (a record interceptor).
 */
public final class RecordKeyResolver<K, V> {
  private static final Logger log = LoggerFactory.getLogger(RecordKeyResolver.class);

  private final String bizType;
  private final KeyExtractor<K, V> keyExtractor;
  private final MissingKeyPolicy missingKeyPolicy;
  private final @Nullable String groupId;
  private final DedupListener listener;

  /**
   * @param bizType the kind of action; validated as {@link DedupKey} does
   * @param groupId the consumer group, named in errors and stored sources; null if unknown
   * @param listener told of records without a key ({@link DedupListener#keyMissing})
   * @throws IllegalArgumentException if {@code bizType} is not a valid biz type
   */
  public RecordKeyResolver(
      String bizType,
      KeyExtractor<K, V> keyExtractor,
      MissingKeyPolicy missingKeyPolicy,
      @Nullable String groupId,
      DedupListener listener) {
    DedupKey.of(bizType, "-"); // validates the biz type now rather than at the first record
    this.bizType = bizType;
    this.keyExtractor = Objects.requireNonNull(keyExtractor, "keyExtractor");
    this.missingKeyPolicy = Objects.requireNonNull(missingKeyPolicy, "missingKeyPolicy");
    this.groupId = groupId;
    this.listener = Objects.requireNonNull(listener, "listener");
  }

  /** {@code topic-partition@offset (group g)}: how the record is named in errors and records. */
  public String source(ConsumerRecord<K, V> record) {
    return RecordSources.describe(record, groupId);
  }

  /**
   * The record's key; empty when it has none and the policy is {@link
   * MissingKeyPolicy#PROCESS_WITHOUT_DEDUP} (logged and reported to the listener).
   *
   * @throws DedupKeyMissingException the record has no key and the policy is {@link
   *     MissingKeyPolicy#FAIL}
   * @throws DedupKeyMalformedException the record has a key that cannot be used, whatever the
   *     policy
   */
  public Optional<DedupKey> resolve(ConsumerRecord<K, V> record) {
    return resolve(record, true);
  }

  /**
   * The key the record is claimed under, without reporting a missing key again (it was reported
   * when the record was handled); empty when it has none or one that cannot be used.
   */
  public Optional<DedupKey> claimedKey(ConsumerRecord<K, V> record) {
    try {
      return resolve(record, false);
    } catch (DedupKeyMissingException | DedupKeyMalformedException e) {
      return Optional.empty();
    }
  }

  private Optional<DedupKey> resolve(ConsumerRecord<K, V> record, boolean report) {
    String source = source(record);
    Optional<String> extracted;
    try {
      extracted = keyExtractor.extract(record);
    } catch (DedupKeyMalformedException e) {
      // Extractors see only the record; the group is known here.
      throw e.source().filter(source::equals).isPresent()
          ? e
          : new DedupKeyMalformedException(e.reason(), source, e.getCause());
    }
    String bizKey;
    if (extracted.isPresent()) {
      bizKey = extracted.get();
    } else {
      if (report) {
        listener.keyMissing(bizType, source);
      }
      switch (missingKeyPolicy) {
        case FAIL ->
            throw new DedupKeyMissingException(
                "Record has no business key for biz type '"
                    + bizType
                    + "': "
                    + keyExtractor.description()
                    + " is absent or empty"
                    + headersIfKeyedByOne(record),
                source,
                null);
        case PROCESS_WITHOUT_DEDUP -> {
          if (report) {
            log.warn(
                "Record {} has no business key for '{}'; processing it without dedup",
                source,
                bizType);
          }
          return Optional.empty();
        }
        case USE_COORDINATES -> {
          if (report) {
            log.info(
                "Record {} has no business key for '{}'; deduplicating by its coordinates",
                source,
                bizType);
          }
          bizKey = RecordSources.coordinates(record);
        }
        default -> throw new IllegalStateException("Unknown policy " + missingKeyPolicy);
      }
    }
    if (DedupKey.isHashedForm(bizKey)) {
      // Stored as it is, it would be the stored form of some long key: whichever of the two came
      // second would be skipped as the other's duplicate. Hashing it too would move the records
      // such keys already have.
      throw new DedupKeyMalformedException(
          "Record's business key is unusable: '"
              + bizKey
              + "' has the form keys over "
              + DedupKey.MAX_BIZ_KEY_LENGTH
              + " characters are stored in ("
              + DedupKey.HASH_PREFIX
              + " and 64 hex digits), so it would be taken for such a key and one of the two"
              + " skipped as the other's duplicate; give the key another form (without the '"
              + DedupKey.HASH_PREFIX
              + "' prefix, say)",
          source,
          null);
    }
    try {
      return Optional.of(DedupKey.of(bizType, bizKey));
    } catch (IllegalArgumentException e) {
      throw new DedupKeyMalformedException(
          "Record's business key is unusable: " + e.getMessage(), source, e);
    }
  }

  public String bizType() {
    return bizType;
  }

  /**
   * For a key taken from a header, the names of the headers the record does have: a name spelt
   * otherwise than the producer's ({@code orderNo} for {@code order-no}) refuses every record, and
   * the refusal alone does not show why. At most ten names, each cut to 64 printable characters.
   */
  private String headersIfKeyedByOne(ConsumerRecord<K, V> record) {
    if (!keyExtractor.description().startsWith("header '")) {
      return "";
    }
    Set<String> names = new LinkedHashSet<>();
    for (Header header : record.headers()) {
      names.add(header.key());
    }
    if (names.isEmpty()) {
      return " (the record has no headers)";
    }
    return " (the record's headers: "
        + names.stream()
            .limit(10)
            .map(name -> "'" + OwnerIds.printable(StoredText.cut(name, 64)) + "'")
            .collect(Collectors.joining(", "))
        + (names.size() > 10 ? ", and " + (names.size() - 10) + " more" : "")
        + ")";
  }
}
