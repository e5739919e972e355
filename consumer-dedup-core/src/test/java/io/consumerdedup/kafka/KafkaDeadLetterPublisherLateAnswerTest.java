package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.testing.TestKafka;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.UUID;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;

/**
 * Dead letters the broker acknowledges only after the publisher stopped waiting, for records that
 * never come back to this publisher (their partition went to another instance): what the publisher
 * keeps of those sends, so that a retry would wait for them, must not pile up for its life.
 */
class KafkaDeadLetterPublisherLateAnswerTest {
  private static final Duration WAIT = Duration.ofSeconds(60);

  private final String topic = "late-dlt-" + UUID.randomUUID();

  @Test
  void sendsAnsweredLateForRecordsNeverRetriedAreNotKeptForTheLifeOfThePublisher()
      throws Exception {
    String deadLetters = topic + "-dlt";
    TestKafka.createTopics(1, topic, deadLetters);
    // Each send waits 1 s in the producer before it goes out, as it would for a broker slow to
    // answer; the publisher gives up waiting after 200 ms, and the producer still writes it.
    Map<String, Object> config = new HashMap<>();
    config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, TestKafka.bootstrapServers());
    config.put(ProducerConfig.ACKS_CONFIG, "all");
    config.put(ProducerConfig.LINGER_MS_CONFIG, 1000);
    try (KafkaProducer<String, String> slow =
        new KafkaProducer<>(config, new StringSerializer(), new StringSerializer())) {
      KafkaDeadLetterPublisher<String, String> publisher =
          KafkaDeadLetterPublisher.builder(slow)
              .sendTimeout(Duration.ofMillis(200))
              .answeredRetention(Duration.ofMillis(500))
              .build();
      int records = 5;
      for (int offset = 0; offset < records; offset++) {
        ConsumerRecord<String, String> record = record(offset);
        assertThatThrownBy(() -> publisher.deadLetter(record, new IllegalStateException("bad")))
            .as("the broker answered within the send timeout: no late answer to keep")
            .isInstanceOf(KafkaException.class)
            .hasMessageContaining("was not acknowledged within");
        // Written before the next record's send starts, which then lingers a whole second too.
        long written = offset + 1;
        await()
            .atMost(WAIT)
            .until(() -> TestKafka.endOffset(new TopicPartition(deadLetters, 0)) == written);
      }

      // Dead letters of other records go on; none of the first records ever comes back. This one
      // too is answered late, a second after the last of the others, and is tried until it was.
      ConsumerRecord<String, String> another = record(records);
      await()
          .atMost(WAIT)
          .pollInterval(Duration.ofMillis(200))
          .ignoreException(KafkaException.class)
          .until(
              () -> {
                publisher.deadLetter(another, new IllegalStateException("bad"));
                return true;
              });
      assertThat(publisher.sendsKept())
          .as("sends kept after their records' answers were in for longer than the retention")
          .isZero();
      assertThat(TestKafka.readFromStart(deadLetters, records + 2, Duration.ofSeconds(4)))
          .as("one dead letter of each record")
          .hasSize(records + 1);
    }
  }

  private ConsumerRecord<String, String> record(long offset) {
    return new ConsumerRecord<>(topic, 0, offset, "k-" + offset, "charge " + offset);
  }
}
