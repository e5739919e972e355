package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * Kafka transactions, ack mode {@code MANUAL_IMMEDIATE}: a listener that acknowledges in the
 * callback of the receipt it sends, which Kafka calls before the transaction commits.
 * consumer-dedup passes that acknowledgment on once the transaction committed; spring-kafka then
 * sends its offset to the transaction that has ended and refuses it (with or without
 * consumer-dedup), so the record stays uncommitted until a later acknowledgment passes it. What the
 * user must see: the record applied once and recorded, and a line that says so, not "Could not
 * record the outcome".
 */
@SpringBootTest(
    classes = KafkaTransactionImmediateLateAckTest.App.class,
    properties = {
      "spring.kafka.producer.transaction-id-prefix=mimm-tx-",
      "spring.kafka.listener.ack-mode=manual_immediate",
      "spring.kafka.consumer.properties.isolation.level=read_committed"
    })
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class KafkaTransactionImmediateLateAckTest {
  static final String TOPIC = "mimm-orders";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_mimm", TOPIC, "mimm-receipts");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;

  @Test
  void aLateAcknowledgmentSpringKafkaRefusesIsNotReportedAsAnOutcomeNotRecorded(
      CapturedOutput output) throws Exception {
    long offset =
        template
            .executeInTransaction(
                t -> {
                  ProducerRecord<String, String> record =
                      new ProducerRecord<>(TOPIC, 0, null, "order 1");
                  record.headers().add("order-no", "IMM-1".getBytes(StandardCharsets.UTF_8));
                  return t.send(record);
                })
            .get()
            .getRecordMetadata()
            .offset();

    await()
        .atMost(Duration.ofSeconds(30))
        .until(() -> output.getOut().contains("its acknowledgment, made after its listener"));
    assertThat(SpringTestEnvironment.effects(jdbc, "mimm", "IMM-1"))
        .as("effects of the record at %d", offset)
        .isEqualTo(1);
    await()
        .atMost(Duration.ofSeconds(10))
        .untilAsserted(
            () ->
                assertThat(
                        jdbc.queryForList(
                            "SELECT status FROM consumer_dedup WHERE biz_type = 'mimm'",
                            String.class))
                    .as("the record's key in the dedup table")
                    .containsExactly("SUCCESS"));
    assertThat(output.getOut())
        .as("what the log says of an applied record whose late acknowledgment spring-kafka refused")
        .doesNotContain("Could not record the outcome")
        .contains("mimm-orders-0@" + offset + " is applied and recorded");
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners(JdbcTemplate jdbc, KafkaTemplate<String, String> template) {
      return new Listeners(jdbc, template);
    }
  }

  static class Listeners {
    final JdbcTemplate jdbc;
    final KafkaTemplate<String, String> template;

    Listeners(JdbcTemplate jdbc, KafkaTemplate<String, String> template) {
      this.jdbc = jdbc;
      this.template = template;
    }

    @Idempotent(bizType = "mimm", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public void on(ConsumerRecord<String, String> record, Acknowledgment ack) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      SpringTestEnvironment.effect(jdbc, "mimm", orderNo, record.value());
      template
          .send("mimm-receipts", orderNo, "receipt for " + orderNo)
          .whenComplete(
              (sent, error) -> {
                if (error == null) {
                  ack.acknowledge();
                }
              });
    }
  }
}
