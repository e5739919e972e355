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
   *     cannot be read (such as a header that is not UTF-8); the message names the record
   */
  Optional<String> extract(ConsumerRecord<K, V> record);
}
