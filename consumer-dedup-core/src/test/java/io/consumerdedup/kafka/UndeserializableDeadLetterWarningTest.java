package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.core.Outcome;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;

/**
 * A dead-letter handler that cannot write a record the deserializer rejects (a lambda, which
 * implements only {@code deadLetter}, or a publisher without a raw producer) is named in a WARN
 * when the loop is built, with what the loop will do with such a record: otherwise the user learns
 * it from a stalled partition or a record the broker archived. Nothing here connects to a broker.
 */
class UndeserializableDeadLetterWarningTest {
  private static final RecordProcessor<String, String> PROCESSOR = record -> Outcome.PROCESSED;
  private static final DeadLetterHandler<String, String> LAMBDA = (record, reason) -> {};

  private final ListAppender<ILoggingEvent> logged = new ListAppender<>();
  private final List<Logger> loggers =
      List.of(
          (Logger) LoggerFactory.getLogger(DedupPollLoop.class),
          (Logger) LoggerFactory.getLogger(DedupShareLoop.class));

  @BeforeEach
  void watchTheLog() {
    logged.start();
    loggers.forEach(logger -> logger.addAppender(logged));
  }

  @AfterEach
  void stopWatching() {
    loggers.forEach(logger -> logger.detachAppender(logged));
  }

  @Test
  void aPollLoopWhoseHandlerImplementsOnlyDeadLetterIsWarnedOfTheHeldPartition() {
    buildPollLoop(LAMBDA);

    assertThat(warnings())
        .singleElement()
        .asString()
        .contains("does not implement deadLetterUndeserializable")
        .contains("such a record holds its partition")
        .contains("rawProducer(...)");
  }

  @Test
  void aPollLoopWhosePublisherHasNoRawProducerIsWarned() {
    buildPollLoop(KafkaDeadLetterPublisher.builder(typedProducer()).build());

    assertThat(warnings())
        .singleElement()
        .asString()
        .contains("a KafkaDeadLetterPublisher built without rawProducer(...)");
  }

  @Test
  void aPollLoopWhosePublisherHasARawProducerIsNotWarned() {
    buildPollLoop(
        KafkaDeadLetterPublisher.builder(typedProducer())
            .rawProducer(
                new MockProducer<>(
                    true, null, new ByteArraySerializer(), new ByteArraySerializer()))
            .build());

    assertThat(warnings()).isEmpty();
  }

  @Test
  void aShareLoopWhoseHandlerImplementsOnlyDeadLetterIsWarnedOfTheArchivedRecord() {
    DedupShareLoop.builder(
            Map.<String, Object>of(
                ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG,
                "127.0.0.1:9",
                ConsumerConfig.GROUP_ID_CONFIG,
                "warned",
                ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG,
                StringDeserializer.class,
                ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                StringDeserializer.class),
            List.of("payments"),
            PROCESSOR)
        .deadLetterHandler(LAMBDA)
        .build()
        .close();

    assertThat(warnings())
        .singleElement()
        .asString()
        .contains("does not implement deadLetterUndeserializable")
        .contains("archives it at the group's delivery-count limit, without a dead letter");
  }

  private void buildPollLoop(DeadLetterHandler<String, String> deadLetters) {
    DedupPollLoop.builder(
            Map.<String, Object>of(
                ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG,
                "127.0.0.1:9",
                ConsumerConfig.GROUP_ID_CONFIG,
                "warned",
                ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG,
                false,
                ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG,
                StringDeserializer.class,
                ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                StringDeserializer.class),
            List.of("payments"),
            PROCESSOR)
        .deadLetterHandler(deadLetters)
        .build()
        .close();
  }

  private static MockProducer<String, String> typedProducer() {
    return new MockProducer<>(true, null, new StringSerializer(), new StringSerializer());
  }

  private List<String> warnings() {
    return logged.list.stream()
        .filter(event -> event.getLevel() == Level.WARN)
        .map(ILoggingEvent::getFormattedMessage)
        .toList();
  }
}
