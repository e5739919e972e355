package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.AppenderBase;
import io.consumerdedup.kafka.KafkaDeadLetterPublisher;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.utils.Utils;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.slf4j.LoggerFactory;
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
 * the record sent after it applied once, as for any other rejected record. So they expect when the
 * line that says the poll rejected it cannot be written at all (a second {@code OutOfMemoryError}
 * as it is, which Logback passes on from its appender).
 */
@SpringBootTest(classes = ShareListenerUnprintableDeserializerTest.App.class)
@DirtiesContext
class ShareListenerUnprintableDeserializerTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String POLLED = "share-unprintable-polled";
  static final String HANDLED = "share-unprintable-handled";
  static final String LINE_LOST = "share-unprintable-line-lost";

  /** The topic and order-no header of each call of the listeners. */
  static final List<String> calls = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "spring_share_unprintable",
        POLLED,
        POLLED + "-dlt",
        HANDLED,
        HANDLED + "-dlt",
        LINE_LOST,
        LINE_LOST + "-dlt");
    for (String group : List.of(POLLED, HANDLED, LINE_LOST)) {
      TestShareGroups.configure(group, Duration.ofSeconds(5));
    }
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;

  @ParameterizedTest
  @ValueSource(strings = {POLLED, HANDLED})
  void aValueRejectedWithAnUnprintableExceptionIsDeadLetteredWithItsBytesAndTheNextApplied(
      String topic) throws Exception {
    sendRejectedThenAwaitNextApplied(topic, "O-2");
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
   * The consumer wrapper's ERROR line saying the poll rejected the record throws an {@code
   * OutOfMemoryError}: the user sees the record dead-lettered once and the record after it applied.
   * Before the fix the Error came out of the poll with the record taken in hand but never returned:
   * the container's consumer stopped on it, the record neither dead-lettered nor rejected.
   */
  @Test
  void aRejectedRecordWhoseLineCannotBeWrittenIsStillDeadLetteredAndTheNextApplied()
      throws Exception {
    Logger wrapperLogger =
        (Logger)
            LoggerFactory.getLogger("io.consumerdedup.spring.autoconfigure.WrappedShareConsumers");
    ThrowingAppender throwing = new ThrowingAppender();
    throwing.start();
    wrapperLogger.addAppender(throwing);
    try {
      // Its own order number: the listener method, and so the key's business type, is POLLED's.
      sendRejectedThenAwaitNextApplied(LINE_LOST, "L-2");
      assertThat(throwing.thrown).as("lines that threw").hasPositiveValue();
      assertThat(readTopic(LINE_LOST + "-dlt", 2, Duration.ofSeconds(3)))
          .as("dead letters")
          .extracting(ConsumerRecord::value)
          .containsExactly(UnprintableRejectingDeserializer.POISON + " charge 1.00");
    } finally {
      wrapperLogger.detachAppender(throwing);
      calls.clear();
    }
  }

  /**
   * Sends order P-1 with a value the deserializer rejects, then order {@code nextOrderNo}, and
   * awaits the latter applied.
   */
  private void sendRejectedThenAwaitNextApplied(String topic, String nextOrderNo) throws Exception {
    SpringTestEnvironment.send(
        template,
        topic,
        UnprintableRejectingDeserializer.POISON + " charge 1.00",
        "order-no",
        "P-1");
    SpringTestEnvironment.send(template, topic, "charge 2.00", "order-no", nextOrderNo);
    await()
        .atMost(WAIT)
        .alias("the record after the rejected one applied")
        .until(() -> SpringTestEnvironment.effects(jdbc, topic, nextOrderNo) == 1);
  }

  /** Throws an {@code OutOfMemoryError} as the first line saying the poll rejected a record. */
  private static final class ThrowingAppender extends AppenderBase<ILoggingEvent> {
    final AtomicInteger thrown = new AtomicInteger();

    @Override
    protected void append(ILoggingEvent event) {
      if (event.getMessage().startsWith("{} cannot be deserialized")
          && thrown.getAndIncrement() == 0) {
        throw new OutOfMemoryError("Java heap space, writing the log line");
      }
    }
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
    @KafkaListener(
        id = LINE_LOST,
        topics = LINE_LOST,
        groupId = LINE_LOST,
        containerFactory = "polledFactory")
    public void polled(ConsumerRecord<String, String> record) {
      handle(record.topic(), record);
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
