package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A key expression whose value is not text: its {@code toString()} is not the business key. Bytes
 * and an object without a {@code toString()} of its own print their identity, another key on every
 * delivery (the action applied again); an empty {@code Optional} prints {@code Optional.empty}, one
 * key for every record without one (all but the first skipped as duplicates). A value that stands
 * for the key is used as that key; one that cannot is refused as a malformed key.
 */
@SpringBootTest(classes = KeyExpressionValueIntegrationTest.App.class)
@DirtiesContext
class KeyExpressionValueIntegrationTest {

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "spring_key_value",
        "key-bytes",
        "key-bytes-dlt",
        "key-optional",
        "key-optional-dlt",
        "key-object",
        "key-object-dlt",
        "fp-bytes",
        "fp-bytes-dlt");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired Listeners listeners;

  @Test
  void aKeyGivenAsHeaderBytesIsOneKeyOnEveryDeliveryNotTheArraysIdentity() throws Exception {
    SpringTestEnvironment.send(template, "key-bytes", "first", "order-no", "B-1");
    SpringTestEnvironment.send(template, "key-bytes", "again", "order-no", "B-1");
    SpringTestEnvironment.send(template, "key-bytes", "next", "order-no", "B-2");

    await()
        .atMost(Duration.ofSeconds(30))
        .until(() -> SpringTestEnvironment.effects(jdbc, "key-bytes", "B-2") == 1);
    assertThat(SpringTestEnvironment.effects(jdbc, "key-bytes", "B-1"))
        .as("runs of the action B-1, sent twice")
        .isEqualTo(1);
    assertThat(storedKeys("bytes")).as("stored keys").containsExactly("B-1", "B-2");
  }

  @Test
  void anEmptyOptionalIsAMissingKeyNotOneKeySharedByEveryRecordWithout() throws Exception {
    SpringTestEnvironment.send(template, "key-optional", "no order number");
    SpringTestEnvironment.send(template, "key-optional", "O-1:10.00");
    SpringTestEnvironment.send(template, "key-optional", "still no order number");
    SpringTestEnvironment.send(template, "key-optional", "O-2:20.00");

    List<ConsumerRecord<String, String>> deadLetters =
        SpringTestEnvironment.readTopic("key-optional-dlt", 2, Duration.ofSeconds(30));
    assertThat(deadLetters)
        .as("records without an order number, dead-lettered as missing keys")
        .extracting(ConsumerRecord::value)
        .containsExactly("no order number", "still no order number");
    assertThat(SpringTestEnvironment.deadLetterReason(deadLetters.get(1)))
        .contains("DedupKeyMissingException");
    await()
        .atMost(Duration.ofSeconds(30))
        .until(() -> SpringTestEnvironment.effects(jdbc, "key-optional", "O-2") == 1);
    assertThat(storedKeys("optional")).as("stored keys").containsExactly("O-1", "O-2");
  }

  @Test
  void aKeyObjectPrintingItsIdentityIsRefusedNamingItsClass() throws Exception {
    SpringTestEnvironment.send(template, "key-object", "first", "order-no", "X-1");
    SpringTestEnvironment.send(template, "key-object", "again", "order-no", "X-1");

    List<ConsumerRecord<String, String>> deadLetters =
        SpringTestEnvironment.readTopic("key-object-dlt", 2, Duration.ofSeconds(30));
    assertThat(deadLetters).extracting(ConsumerRecord::value).containsExactly("first", "again");
    assertThat(SpringTestEnvironment.deadLetterReason(deadLetters.get(0)))
        .contains("DedupKeyMalformedException")
        .contains(OrderId.class.getName())
        .contains("toString()");
    assertThat(SpringTestEnvironment.effects(jdbc, "key-object", "X-1"))
        .as("runs of the action under a key that changes per delivery")
        .isZero();
    assertThat(storedKeys("object")).as("stored keys").isEmpty();
  }

  @Test
  void aPayloadOfBytesIsFingerprintedByItsContentSoItsRetryIsNoConflict() throws Exception {
    SpringTestEnvironment.send(template, "fp-bytes", "F-1:10.00", "order-no", "F-1");

    // Refused as a conflict, the retry would go to the recoverer, which cannot publish bytes with
    // the application's String serializer: the record would come again without end, never applied.
    await()
        .atMost(Duration.ofSeconds(15))
        .untilAsserted(
            () ->
                assertThat(SpringTestEnvironment.effects(jdbc, "fp-bytes", "F-1"))
                    .as("runs of the action after one failure, and its retry: %s", calls())
                    .isEqualTo(1));
    assertThat(calls()).as("calls of the listener").isEqualTo(2);
  }

  private int calls() {
    return listeners.fingerprintedCalls();
  }

  private List<String> storedKeys(String bizType) {
    return jdbc.queryForList(
        "SELECT biz_key FROM consumer_dedup WHERE biz_type = ? ORDER BY biz_key",
        String.class,
        bizType);
  }

  /** An application's key type that does not override {@code toString()}. */
  static final class OrderId {
    final String value;

    OrderId(String value) {
      this.value = value;
    }
  }

  /** An application's key function: the order number before a colon, if there is one. */
  static final class Keys {
    public Optional<String> orderNo(String payload) {
      int colon = payload.indexOf(':');
      return colon < 0 ? Optional.empty() : Optional.of(payload.substring(0, colon));
    }

    public OrderId orderId(String orderNo) {
      return new OrderId(orderNo);
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      return SpringTestEnvironment.deadLettering(template, 100, 2);
    }

    @Bean
    Keys keys() {
      return new Keys();
    }

    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }
  }

  static class Listeners {
    final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "bytes", key = "#record.headers().lastHeader('order-no').value()")
    @KafkaListener(id = "key-bytes", topics = "key-bytes")
    public void bytes(ConsumerRecord<String, String> record) {
      SpringTestEnvironment.effect(
          jdbc, "key-bytes", SpringTestEnvironment.header(record, "order-no"), record.value());
    }

    @Idempotent(bizType = "optional", key = "@keys.orderNo(#payload)")
    @KafkaListener(id = "key-optional", topics = "key-optional")
    public void optional(String payload) {
      SpringTestEnvironment.effect(
          jdbc, "key-optional", new Keys().orderNo(payload).orElse(null), payload);
    }

    private final AtomicInteger fingerprintedCalls = new AtomicInteger();

    /** A method, not the field: the bean is a proxy. */
    public int fingerprintedCalls() {
      return fingerprintedCalls.get();
    }

    /** Fails its first call, as a transient failure would. */
    @Idempotent(bizType = "fingerprinted", header = "order-no", fingerprint = "#payload")
    @KafkaListener(
        id = "fp-bytes",
        topics = "fp-bytes",
        properties =
            "value.deserializer=org.apache.kafka.common.serialization.ByteArrayDeserializer")
    public void fingerprinted(ConsumerRecord<String, byte[]> record) {
      if (fingerprintedCalls.incrementAndGet() == 1) {
        throw new IllegalStateException("transient failure");
      }
      SpringTestEnvironment.effect(
          jdbc,
          "fp-bytes",
          SpringTestEnvironment.header(record, "order-no"),
          new String(record.value(), StandardCharsets.UTF_8));
    }

    @Idempotent(bizType = "object", key = "@keys.orderId(#headers['order-no'])")
    @KafkaListener(id = "key-object", topics = "key-object")
    public void object(ConsumerRecord<String, String> record) {
      SpringTestEnvironment.effect(
          jdbc, "key-object", SpringTestEnvironment.header(record, "order-no"), record.value());
    }
  }
}
