package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.kafka.KafkaDeadLetterPublisher;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.utils.Utils;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.support.serializer.ErrorHandlingDeserializer;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * {@code @Idempotent} share listeners whose value deserializer rejects a record with an exception
 * whose {@code getMessage()} throws (one that prints a field it cannot read): read by the
 * consumer's poll, which throws for the record, and through spring-kafka's {@code
 * ErrorHandlingDeserializer}, which passes the exception on in a header. The user expects the
 * record dead-lettered once with the bytes it was sent with, the listener never called with it, and
 * the record sent after it applied once, as for any other rejected record.
 */
@SpringBootTest(classes = ShareListenerUnprintableDeserializerTest.App.class)
@DirtiesContext
class ShareListenerUnprintableDeserializerTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String POLLED = "share-unprintable-polled";
  static final String HANDLED = "share-unprintable-handled";

  /** The topic and order-no header of each call of the listeners. */
  static final List<String> calls = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry, "spring_share_unprintable", POLLED, POLLED + "-dlt", HANDLED, HANDLED + "-dlt");
    TestShareGroups.configure(POLLED, Duration.ofSeconds(5));
    TestShareGroups.configure(HANDLED, Duration.ofSeconds(5));
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;

  @ParameterizedTest
  @ValueSource(strings = {POLLED, HANDLED})
  void aValueRejectedWithAnUnprintableExceptionIsDeadLetteredWithItsBytesAndTheNextApplied(
      String topic) throws Exception {
    SpringTestEnvironment.send(
        template,
        topic,
        UnprintableRejectingDeserializer.POISON + " charge 1.00",
        "order-no",
        "P-1");
    SpringTestEnvironment.send(template, topic, "charge 2.00", "order-no", "O-2");

    await()
        .atMost(WAIT)
        .alias("the record after the rejected one applied")
        .until(() -> SpringTestEnvironment.effects(jdbc, topic, "O-2") == 1);
    List<ConsumerRecord<String, String>> deadLetters = readTopic(topic + "-dlt", 1, WAIT);
    assertThat(deadLetters).as("dead letters").hasSize(1);
    ConsumerRecord<String, String> deadLetter = deadLetters.get(0);
    assertThat(header(deadLetter, "order-no")).isEqualTo("P-1");
    assertThat(deadLetter.value())
        .as("the bytes sent")
        .isEqualTo(UnprintableRejectingDeserializer.POISON + " charge 1.00");
    assertThat(header(deadLetter, KafkaDeadLetterPublisher.UNDESERIALIZABLE_HEADER))
        .isEqualTo("value");
    assertThat(readTopic(topic + "-dlt", 2, Duration.ofSeconds(2)))
        .as("dead letters, a while later")
        .hasSize(1);
    assertThat(calls).as("listener calls, by topic and order-no").containsExactly(topic + " O-2");
    assertThat(TestShareGroups.remaining(topic, topic, Duration.ofSeconds(2)))
        .as("left in the queue")
        .isEmpty();
    calls.clear();
  }

  /**
   * Rejects a value beginning with {@link #POISON} with an exception whose {@code getMessage()}
   * throws; serializable, as {@code ErrorHandlingDeserializer} writes it into a header.
   */
  public static final class UnprintableRejectingDeserializer extends StringDeserializer {
    static final String POISON = "%%";

    @Override
    public String deserialize(String topic, byte[] data) {
      String text = super.deserialize(topic, data);
      if (text != null && text.startsWith(POISON)) {
        throw new UnprintableRejection();
      }
      return text;
    }

    /** The form a consumer calls; StringDeserializer's own does not go through the one above. */
    @Override
    public String deserialize(String topic, Headers headers, ByteBuffer data) {
      return deserialize(topic, Utils.toNullableArray(data));
    }
  }

  static final class UnprintableRejection extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    @Override
    public String getMessage() {
      throw new IllegalStateException("could not initialize the lazily loaded entity");
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    /** The consumer's own deserializer: its poll throws for the record. */
    @Bean
    ShareKafkaListenerContainerFactory<String, String> polledFactory() {
      Map<String, Object> config =
          ShareListenerTests.consumerConfig(
              StringDeserializer.class, UnprintableRejectingDeserializer.class);
      config.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 10);
      return ShareListenerTests.shareFactory(config);
    }

    /** Through ErrorHandlingDeserializer: the record reaches the listener's worker. */
    @Bean
    ShareKafkaListenerContainerFactory<String, String> handledFactory() {
      Map<String, Object> config =
          ShareListenerTests.consumerConfig(
              StringDeserializer.class, ErrorHandlingDeserializer.class);
      config.put(
          ErrorHandlingDeserializer.VALUE_DESERIALIZER_CLASS,
          UnprintableRejectingDeserializer.class);
      config.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 10);
      return ShareListenerTests.shareFactory(config);
    }

    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }
  }

  static class Listeners {
    private final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "unprintable-polled", header = "order-no")
    @KafkaListener(
        id = POLLED,
        topics = POLLED,
        groupId = POLLED,
        containerFactory = "polledFactory")
    public void polled(ConsumerRecord<String, String> record) {
      handle(POLLED, record);
    }

    @Idempotent(bizType = "unprintable-handled", header = "order-no")
    @KafkaListener(
        id = HANDLED,
        topics = HANDLED,
        groupId = HANDLED,
        containerFactory = "handledFactory")
    public void handled(ConsumerRecord<String, String> record) {
      handle(HANDLED, record);
    }

    private void handle(String topic, ConsumerRecord<String, String> record) {
      String orderNo = header(record, "order-no");
      calls.add(topic + " " + orderNo);
      SpringTestEnvironment.effect(jdbc, topic, orderNo, record.value());
    }
  }
}
