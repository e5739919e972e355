package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.consumerdedup.core.DedupKeyMalformedException;
import java.nio.charset.StandardCharsets;
import java.util.Optional;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Test;

/** Deriving business keys from records, on hand-built records (no broker). */
class KeyExtractorsTest {
  private static final byte[] NOT_UTF8 = {(byte) 0xC3, (byte) 0x28};

  private static <K> ConsumerRecord<K, String> record(@Nullable K key, @Nullable String value) {
    return new ConsumerRecord<>("payments", 3, 42L, key, value);
  }

  private static ConsumerRecord<String, String> withHeader(String name, byte[] value) {
    ConsumerRecord<String, String> record = record("k", "v");
    record.headers().add(name, value);
    return record;
  }

  @Test
  void headerReadsTheLastHeaderOfThatNameAsUtf8() {
    ConsumerRecord<String, String> record = withHeader("order-no", utf8("ORD-1"));
    record.headers().add("order-no", utf8("ORD-ü2"));

    assertThat(KeyExtractors.<String, String>header("order-no").extract(record)).contains("ORD-ü2");
  }

  @Test
  void anAbsentOrEmptyHeaderIsAMissingKey() {
    KeyExtractor<String, String> extractor = KeyExtractors.header("order-no");

    assertThat(extractor.extract(record("k", "v"))).isEmpty();
    assertThat(extractor.extract(withHeader("order-no", new byte[0]))).isEmpty();
    assertThat(extractor.extract(withHeader("other", utf8("ORD-1")))).isEmpty();
  }

  @Test
  void aHeaderThatIsNotUtf8IsMalformedNamingTheHeaderAndTheRecord() {
    KeyExtractor<String, String> extractor = KeyExtractors.header("order-no");

    assertThatThrownBy(() -> extractor.extract(withHeader("order-no", NOT_UTF8)))
        .isInstanceOf(DedupKeyMalformedException.class)
        .hasMessageContaining("header 'order-no'")
        .hasMessageContaining("not valid UTF-8")
        .hasMessageContaining("payments-3@42");
    // An order number whose last byte is not UTF-8 (a text read as ASCII up to there).
    byte[] asciiThenBroken = {'O', 'R', 'D', '-', '1', (byte) 0xFF};
    assertThatThrownBy(() -> extractor.extract(withHeader("order-no", asciiThenBroken)))
        .isInstanceOf(DedupKeyMalformedException.class)
        .hasMessageContaining("not valid UTF-8");
  }

  @Test
  void aBlankHeaderNameIsRefused() {
    assertThatThrownBy(() -> KeyExtractors.header(" "))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("header name");
  }

  @Test
  void recordKeyReadsStringAndUtf8ByteKeys() {
    assertThat(KeyExtractors.<String, String>recordKey().extract(record("ORD-1", "v")))
        .contains("ORD-1");
    assertThat(KeyExtractors.<byte[], String>recordKey().extract(record(utf8("ORD-2"), "v")))
        .contains("ORD-2");
  }

  @Test
  void aNullOrEmptyRecordKeyIsAMissingKey() {
    assertThat(KeyExtractors.<String, String>recordKey().extract(record(null, "v"))).isEmpty();
    assertThat(KeyExtractors.<String, String>recordKey().extract(record("", "v"))).isEmpty();
    assertThat(KeyExtractors.<byte[], String>recordKey().extract(record(new byte[0], "v")))
        .isEmpty();
  }

  @Test
  void aRecordKeyThatIsNotUtf8OrOfAnotherTypeIsMalformed() {
    assertThatThrownBy(
            () -> KeyExtractors.<byte[], String>recordKey().extract(record(NOT_UTF8, "v")))
        .isInstanceOf(DedupKeyMalformedException.class)
        .hasMessageContaining("record key")
        .hasMessageContaining("payments-3@42");
    assertThatThrownBy(() -> KeyExtractors.<Long, String>recordKey().extract(record(7L, "v")))
        .isInstanceOf(DedupKeyMalformedException.class)
        .hasMessageContaining("java.lang.Long")
        .hasMessageContaining("payments-3@42");
  }

  @Test
  void valueDerivesTheKeyFromTheRecordValue() {
    KeyExtractor<String, String> orderNo =
        KeyExtractors.value(value -> value.startsWith("order:") ? value.substring(6) : null);

    assertThat(orderNo.extract(record("k", "order:ORD-9"))).contains("ORD-9");
    assertThat(orderNo.extract(record("k", "heartbeat"))).isEmpty();
    assertThat(orderNo.extract(record("k", "order:"))).isEmpty();
    assertThat(orderNo.extract(record("k", null))).isEmpty();
  }

  @Test
  void coordinatesNameTopicPartitionAndOffset() {
    assertThat(KeyExtractors.<String, String>coordinates().extract(record("k", "v")))
        .isEqualTo(Optional.of("payments-3@42"));
  }

  private static byte[] utf8(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }
}
