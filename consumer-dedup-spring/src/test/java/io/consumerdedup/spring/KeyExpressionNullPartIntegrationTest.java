package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import java.time.Duration;
import java.util.List;
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
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A composite key, {@code #headers['tenant'] + ':' + #headers['order-no']}: SpEL renders a header
 * the record lacks as the text "null", so without a check every record of a tenant without an order
 * number would share the key {@code acme:null}, the first applied and the rest skipped as its
 * duplicates. A header that reads null and reaches the key makes the key missing (the missing-key
 * policy: dead-lettered by default); one an expression deliberately falls back from ({@code ?:})
 * does not.
 */
@SpringBootTest(classes = KeyExpressionNullPartIntegrationTest.App.class)
@DirtiesContext
class KeyExpressionNullPartIntegrationTest {

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "spring_key_null_part",
        "key-part",
        "key-part-dlt",
        "key-fallback",
        "key-map",
        "key-map-dlt",
        "key-getter");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;

  @Test
  void recordsWithoutOnePartOfACompositeKeyAreMissingTheKeyNotDuplicatesOfEachOther()
      throws Exception {
    SpringTestEnvironment.send(template, "key-part", "first", "tenant", "acme");
    SpringTestEnvironment.send(template, "key-part", "second", "tenant", "acme");
    SpringTestEnvironment.send(template, "key-part", "third", "tenant", "acme", "order-no", "7");

    List<ConsumerRecord<String, String>> deadLetters =
        SpringTestEnvironment.readTopic("key-part-dlt", 2, Duration.ofSeconds(30));
    assertThat(deadLetters).extracting(ConsumerRecord::value).containsExactly("first", "second");
    assertThat(deadLetters)
        .allSatisfy(
            deadLetter ->
                assertThat(SpringTestEnvironment.deadLetterReason(deadLetter))
                    .contains("DedupKeyMissingException")
                    .contains("header 'order-no'"));
    await()
        .atMost(Duration.ofSeconds(30))
        .until(() -> SpringTestEnvironment.effects(jdbc, "key-part", "acme:7") == 1);
    assertThat(SpringTestEnvironment.effects(jdbc, "key-part", "acme:null"))
        .as("records applied under a key made of the text 'null'")
        .isZero();
    assertThat(
            jdbc.queryForObject(
                "SELECT count(*) FROM consumer_dedup WHERE biz_type = 'order' AND biz_key LIKE"
                    + " '%null%'",
                Integer.class))
        .as("dedup rows of a key made of the text 'null'")
        .isZero();
  }

  @Test
  void aHeaderTheExpressionFallsBackFromIsNotAMissingPart() throws Exception {
    SpringTestEnvironment.send(
        template, "key-fallback", "legacy", "tenant", "acme", "legacy-no", "L1");

    await()
        .atMost(Duration.ofSeconds(30))
        .until(() -> SpringTestEnvironment.effects(jdbc, "key-fallback", "acme:L1") == 1);
  }

  /**
   * A fallen-back-from header read null, and the value used instead merely contains the text
   * "null": the key {@code acme:nullable-7} has no part that is "null" and is applied.
   */
  @Test
  void aKeyPartMerelyContainingTheTextNullIsNotAMissingPart() throws Exception {
    SpringTestEnvironment.send(
        template, "key-fallback", "nullable", "tenant", "acme", "legacy-no", "nullable-7");

    await()
        .atMost(Duration.ofSeconds(30))
        .until(() -> SpringTestEnvironment.effects(jdbc, "key-fallback", "acme:nullable-7") == 1);
  }

  /**
   * A Map's entry read as a property, as {@code #payload.orderNo} reads a JSON object converted to
   * a Map: SpEL alone fails on it (EL1008E), and every record was dead-lettered as malformed.
   */
  @Test
  void aMapsEntryIsReadAsAProperty() throws Exception {
    SpringTestEnvironment.send(template, "key-map", "M-1");

    await()
        .atMost(Duration.ofSeconds(30))
        .until(() -> SpringTestEnvironment.effects(jdbc, "key-map", "M-1") == 1);
    assertThat(
            jdbc.queryForObject(
                "SELECT count(*) FROM consumer_dedup WHERE biz_type = 'map-order' AND biz_key ="
                    + " 'M-1'",
                Integer.class))
        .as("the dedup row under the Map entry's value")
        .isEqualTo(1);
  }

  /**
   * A Map with a getter of the property's name ({@code empty}, or a payload class extending HashMap
   * with getters) is read through the getter, as before Map entries were read: reading the entry
   * changed the key of an expression that worked, and its dedup rows stopped matching.
   */
  @Test
  void aMapsGetterIsReadAheadOfItsEntry() throws Exception {
    SpringTestEnvironment.send(template, "key-getter", "G-1");

    await()
        .atMost(Duration.ofSeconds(30))
        .until(
            () ->
                jdbc.queryForObject(
                        "SELECT count(*) FROM consumer_dedup WHERE biz_type = 'getter-order'",
                        Integer.class)
                    == 1);
    assertThat(
            jdbc.queryForObject(
                "SELECT biz_key FROM consumer_dedup WHERE biz_type = 'getter-order'", String.class))
        .as("the key, read through the Map's isEmpty() rather than its entry 'empty'")
        .isEqualTo("false:G-1");
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      return SpringTestEnvironment.deadLettering(template, 100, 5);
    }

    @Bean
    Orders orders(JdbcTemplate jdbc) {
      return new Orders(jdbc);
    }
  }

  static class Orders {
    final JdbcTemplate jdbc;

    Orders(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "order", key = "#headers['tenant'] + ':' + #headers['order-no']")
    @KafkaListener(id = "key-part", topics = "key-part")
    public void place(
        String payload,
        @Header("tenant") String tenant,
        @Header(name = "order-no", required = false) String orderNo) {
      SpringTestEnvironment.effect(jdbc, "key-part", tenant + ":" + orderNo, payload);
    }

    @Idempotent(
        bizType = "legacy-order",
        key = "#headers['tenant'] + ':' + (#headers['order-no'] ?: #headers['legacy-no'])")
    @KafkaListener(id = "key-fallback", topics = "key-fallback")
    public void placeLegacy(
        String payload,
        @Header("tenant") String tenant,
        @Header(name = "order-no", required = false) String orderNo,
        @Header(name = "legacy-no", required = false) String legacyNo) {
      SpringTestEnvironment.effect(
          jdbc, "key-fallback", tenant + ":" + (orderNo != null ? orderNo : legacyNo), payload);
    }

    @Idempotent(
        bizType = "getter-order",
        key = "new java.util.HashMap(T(java.util.Map).of('empty', 'entry')).empty + ':' + #payload")
    @KafkaListener(id = "key-getter", topics = "key-getter")
    public void placeFromMapGetter(String payload) {
      SpringTestEnvironment.effect(jdbc, "key-getter", payload, payload);
    }

    @Idempotent(bizType = "map-order", key = "T(java.util.Map).of('orderNo', #payload).orderNo")
    @KafkaListener(id = "key-map", topics = "key-map")
    public void placeFromMap(String payload) {
      SpringTestEnvironment.effect(jdbc, "key-map", payload, payload);
    }
  }
}
