package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.test.utils.ContainerTestUtils;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * The consumer-group side of {@code ShareListenerUndeserializableTest}: {@code @Idempotent} record
 * and batch listeners of consumer groups whose values are read through {@code
 * ErrorHandlingDeserializer}, with the usual error handler and dead-letter topic. The user expects
 * a record whose value the delegate rejects dead-lettered at once with the bytes it was sent with,
 * the listener never called with it, no key of it SUCCESS or left claimed, and the records around
 * it applied once.
 */
@SpringBootTest(
    classes = ConsumerGroupUndeserializableTest.App.class,
    properties = {
      "spring.kafka.consumer.value-deserializer="
          + "org.springframework.kafka.support.serializer.ErrorHandlingDeserializer",
      "spring.kafka.consumer.properties.spring.deserializer.value.delegate.class="
          + "io.consumerdedup.spring.RejectingDeserializer",
      // The dead letter of a record not deserialized is its bytes, which StringSerializer refuses.
      "spring.kafka.producer.value-serializer="
          + "org.springframework.kafka.support.serializer.StringOrBytesSerializer"
    })
@DirtiesContext
class ConsumerGroupUndeserializableTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String TOPIC = "record-undeserializable";
  static final String BATCH = "batch-undeserializable";
  static final String POISON = RejectingDeserializer.POISON;

  /** The order-no header of each call of the listener. */
  static final List<String> calls = new CopyOnWriteArrayList<>();

  /** The order-no header of each record the batch listener was called with. */
  static final List<String> batchCalls = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry, "spring_group_undeserializable", TOPIC, TOPIC + "-dlt", BATCH, BATCH + "-dlt");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired KafkaListenerEndpointRegistry containers;

  /**
   * spring-kafka's record container turns the failure header into a {@code
   * DeserializationException} for the error handler before any interceptor or listener sees the
   * record.
   */
  @Test
  void aRecordListenerNeverSeesARecordTheDeserializerRejected() throws Exception {
    send(template, TOPIC, "charge 1.00", "order-no", "O-1");
    send(template, TOPIC, POISON + " charge 2.00", "order-no", "P-2");
    send(template, TOPIC, "charge 3.00", "order-no", "O-3");

    await().atMost(WAIT).until(() -> SpringTestEnvironment.effects(jdbc, TOPIC, "O-3") == 1);
    assertThat(SpringTestEnvironment.effects(jdbc, TOPIC, "O-1")).isEqualTo(1);
    assertThat(calls).as("listener calls, by order-no").containsExactly("O-1", "O-3");
    assertDeadLetteredOnce(TOPIC, "record");
  }

  /**
   * spring-kafka hands a batch listener the whole batch, the rejected record with a null value: the
   * batch stops before that record, which goes to the error handler.
   */
  @Test
  void aBatchListenerIsNotCalledWithARecordTheDeserializerRejected() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(BATCH);
    ContainerTestUtils.waitForAssignment(container, 1);
    container.stop(); // the three records in one poll, one batch
    send(template, BATCH, "charge 1.00", "order-no", "B-1");
    send(template, BATCH, POISON + " charge 2.00", "order-no", "P-2");
    send(template, BATCH, "charge 3.00", "order-no", "B-3");
    container.start();

    await().atMost(WAIT).until(() -> SpringTestEnvironment.effects(jdbc, BATCH, "B-3") == 1);
    assertThat(SpringTestEnvironment.effects(jdbc, BATCH, "B-1")).isEqualTo(1);
    assertThat(batchCalls).as("records the listener was called with").doesNotContain("P-2");
    assertDeadLetteredOnce(BATCH, "batch");
  }

  private void assertDeadLetteredOnce(String topic, String bizType) {
    List<ConsumerRecord<String, String>> deadLetters = readTopic(topic + "-dlt", 1, WAIT);
    assertThat(deadLetters).as("dead letters").hasSize(1);
    assertThat(header(deadLetters.get(0), "order-no")).isEqualTo("P-2");
    assertThat(deadLetters.get(0).value()).as("the bytes sent").isEqualTo(POISON + " charge 2.00");
    assertThat(SpringTestEnvironment.deadLetterReason(deadLetters.get(0)))
        .contains("poisoned value");
    assertThat(
            jdbc.queryForList(
                "SELECT biz_key || ' ' || status FROM consumer_dedup WHERE biz_type = ?"
                    + " AND biz_key = 'P-2'",
                String.class,
                bizType))
        .as("dedup row of the rejected record")
        .isEmpty();
    assertThat(readTopic(topic + "-dlt", 2, Duration.ofSeconds(1))).as("dead letters").hasSize(1);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    /** The usual wiring: retries with a back-off, then the dead-letter topic. */
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      return SpringTestEnvironment.deadLettering(template, 100, 5);
    }

    @Bean
    Listener listener(JdbcTemplate jdbc) {
      return new Listener(jdbc);
    }
  }

  static class Listener {
    private final JdbcTemplate jdbc;

    Listener(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    /** Takes a null value in its stride, as many handlers would. */
    @Idempotent(bizType = "record", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public void handle(ConsumerRecord<String, String> record) {
      String orderNo = header(record, "order-no");
      calls.add(orderNo);
      SpringTestEnvironment.effect(jdbc, TOPIC, orderNo, record.value());
    }

    /** Takes a null value in its stride too. */
    @Idempotent(bizType = "batch", header = "order-no")
    @KafkaListener(id = BATCH, topics = BATCH, batch = "true")
    public void handleBatch(List<ConsumerRecord<String, String>> records) {
      for (ConsumerRecord<String, String> record : records) {
        String orderNo = header(record, "order-no");
        batchCalls.add(orderNo);
        SpringTestEnvironment.effect(jdbc, BATCH, orderNo, record.value());
      }
    }
  }
}
