package io.consumerdedup.kafka;

import io.consumerdedup.core.DedupKeyMalformedException;
import io.consumerdedup.kafka.internal.RecordSources;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Objects;
import java.util.Optional;
import java.util.function.Function;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.jspecify.annotations.Nullable;

/** The common {@link KeyExtractor}s. */
public final class KeyExtractors {
  private KeyExtractors() {}

  /**
   * The value of the last header named {@code name}, strictly decoded as UTF-8. An absent or empty
   * header is a missing key; bytes that are not UTF-8 raise {@link DedupKeyMalformedException}
   * naming the header and {@code topic-partition@offset}. This is the usual choice: producers put
   * the order number or external transaction id in a header.
   */
  public static <K, V> KeyExtractor<K, V> header(String name) {
    Objects.requireNonNull(name, "name");
    if (name.isBlank()) {
      throw new IllegalArgumentException("header name must not be blank");
    }
    String what = "header '" + name + "'";
    return KeyExtractor.named(
        what,
        record -> {
          Header header = record.headers().lastHeader(name);
          if (header == null || header.value() == null || header.value().length == 0) {
            return Optional.empty();
          }
          return Optional.of(decodeUtf8(header.value(), what, record));
        });
  }

  /**
   * The record key, which must be a String (use a {@code StringDeserializer}) or bytes (decoded
   * strictly as UTF-8). A null or empty record key is a missing key.
   */
  public static <K, V> KeyExtractor<K, V> recordKey() {
    return KeyExtractor.named(
        "the record key",
        record -> {
          Object key = record.key();
          if (key == null) {
            return Optional.empty();
          }
          String text;
          if (key instanceof String string) {
            text = string;
          } else if (key instanceof byte[] bytes) {
            text = decodeUtf8(bytes, "record key", record);
          } else {
            throw new DedupKeyMalformedException(
                "Record key is a "
                    + key.getClass().getName()
                    + "; recordKey() needs a String or byte[] key (or use KeyExtractors.value(...))",
                RecordSources.describe(record, null),
                null);
          }
          return text.isEmpty() ? Optional.empty() : Optional.of(text);
        });
  }

  /**
   * A key computed from the record value, such as {@code value(Payment::orderNo)}. A null or empty
   * result is a missing key.
   */
  public static <K, V> KeyExtractor<K, V> value(Function<? super V, @Nullable String> function) {
    Objects.requireNonNull(function, "function");
    return KeyExtractor.named(
        "a value of the record",
        record -> {
          V value = record.value();
          if (value == null) {
            return Optional.empty();
          }
          String key = function.apply(value);
          return key == null || key.isEmpty() ? Optional.empty() : Optional.of(key);
        });
  }

  /**
   * {@code topic-partition@offset}: protects against redelivery of the same record only (a lost
   * offset commit, a rebalance), not against the same action sent twice (a producer retry, a
   * repeated callback), which arrives at another offset. Prefer a business key.
   */
  public static <K, V> KeyExtractor<K, V> coordinates() {
    return KeyExtractor.named(
        "the record's coordinates", record -> Optional.of(RecordSources.coordinates(record)));
  }

  /**
   * {@code bytes} of a key strictly decoded as UTF-8, as {@link #header(String)} and {@link
   * #recordKey()} decode theirs: for an extractor of its own that reads bytes.
   *
   * @param what the key's origin as the error names it, such as {@code header 'order-no'}
   * @throws DedupKeyMalformedException if the bytes are not UTF-8, naming {@code what} and the
   *     record
   */
  public static String decodeUtf8(byte[] bytes, String what, ConsumerRecord<?, ?> record) {
    if (isAscii(bytes)) {
      // Order numbers and ids are ASCII: valid UTF-8 as they are, read without a strict decoder
      // (one a record, a third of the key's cost on a record listener's thread).
      return new String(bytes, StandardCharsets.US_ASCII);
    }
    try {
      return StandardCharsets.UTF_8
          .newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(bytes))
          .toString();
    } catch (CharacterCodingException e) {
      throw new DedupKeyMalformedException(
          "Key " + what + " is not valid UTF-8 (" + bytes.length + " bytes)",
          RecordSources.describe(record, null),
          e);
    }
  }

  private static boolean isAscii(byte[] bytes) {
    for (byte b : bytes) {
      if (b < 0) {
        return false;
      }
    }
    return true;
  }
}
