package io.consumerdedup.kafka;

import java.util.Optional;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * Derives the business key ({@code bizKey}) of a record; the {@code bizType} comes from the
 * handler. See {@link KeyExtractors} for the common ones.
 */
@FunctionalInterface
public interface KeyExtractor<K, V> {

  /**
   * The record's business key, or empty if it has none.
   *
   * @throws io.consumerdedup.core.DedupKeyMalformedException if the record carries a key that
   *     cannot be read (such as a header that is not UTF-8); the message names the record. Under an
   *     {@link IdempotentRecordHandler} any other exception is taken for one too: the record is
   *     dead-lettered at once, as a key that cannot be derived, not retried
   */
  Optional<String> extract(ConsumerRecord<K, V> record);

  /**
   * Where the key is looked for, named in the error about a record without one, such as {@code
   * header 'order-no'}.
   */
  default String description() {
    return "the key extractor";
  }

  /** This extractor, described as {@code description} in errors. */
  static <K, V> KeyExtractor<K, V> named(String description, KeyExtractor<K, V> extractor) {
    java.util.Objects.requireNonNull(description, "description");
    java.util.Objects.requireNonNull(extractor, "extractor");
    return new KeyExtractor<>() {
      @Override
      public Optional<String> extract(ConsumerRecord<K, V> record) {
        return extractor.extract(record);
      }

      @Override
      public String description() {
        return description;
      }

      @Override
      public String toString() {
        return description;
      }
    };
  }
}
