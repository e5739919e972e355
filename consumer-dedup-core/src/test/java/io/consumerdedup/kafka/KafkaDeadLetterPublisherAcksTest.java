package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.testing.TestKafka;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.UUID;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;

/**
 * A dead-letter producer that does not wait for the broker ({@code acks=0}, a setting an
 * application may share with its other producers): the send's future completes once the request is
 * on the wire, whatever the broker does with it. The loops reject or commit past a record once its
 * dead letter returns, so the publisher must not report a dead letter written that it cannot know
 * was.
 */
class KafkaDeadLetterPublisherAcksTest {
  private final String topic = "acks-dlt-" + UUID.randomUUID();

  @Test
  void aDeadLetterTheBrokerNeverAcknowledgedIsNotReportedWritten() throws Exception {
    String deadLetters = topic + "-dlt";
    TestKafka.createTopics(1, topic);
    // The broker refuses the dead letter (too large for the topic); with acks=0 nobody hears it.
    TestKafka.createTopic(deadLetters, 1, Map.of("max.message.bytes", "2000"));
    Map<String, Object> config = new HashMap<>();
    config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, TestKafka.bootstrapServers());
    config.put(ProducerConfig.ACKS_CONFIG, "0");
    config.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false);
    try (KafkaProducer<String, String> fireAndForget =
        new KafkaProducer<>(config, new StringSerializer(), new StringSerializer())) {
      KafkaDeadLetterPublisher<String, String> publisher =
          KafkaDeadLetterPublisher.builder(fireAndForget).build();
      ConsumerRecord<String, String> record =
          new ConsumerRecord<>(topic, 0, 7, "k-7", "x".repeat(3000));

      Throwable refused =
          catchThrowable(
              () -> publisher.deadLetter(record, new IllegalStateException("payment refused")));

      boolean written = !TestKafka.readFromStart(deadLetters, 1, Duration.ofSeconds(3)).isEmpty();
      assertThat(refused != null || written)
          .as(
              "deadLetter returned normally (the loop then rejects or commits past the record),"
                  + " though the dead-letter topic holds nothing")
          .isTrue();
      assertThat(refused)
          .isInstanceOf(KafkaException.class)
          .hasMessageContaining("acks=0")
          .hasMessageContaining(topic + "-0@7");
    }
  }
}
