package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.test.KafkaClusterTestKit;
import org.junit.jupiter.api.Test;
import org.springframework.kafka.core.DefaultShareConsumerFactory;
import org.springframework.kafka.core.ShareConsumerFactory;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.ShareKafkaMessageListenerContainer;

/**
 * The close of a consumer that consumer-dedup wraps, as the container closes it: an {@code Error}
 * (an {@code OutOfMemoryError}) thrown while the share listener finishes its records skipped the
 * consumer's own close, so it never left its group and the records it had acquired stayed locked
 * until their locks ran out; and against a broker that no longer answers the close took
 * kafka-clients' 30 s. Against the real broker (one of the test's own for the one it stops). Spring
 * Boot 4.0 refuses share listeners, so the boot40 module leaves this class out.
 */
class ShareListenerConsumerCloseErrorTest {
  static final String TOPIC = "share-close-error";

  /** Long enough that a record left locked is not acquirable again within the look below. */
  static final Duration LOCK = Duration.ofSeconds(50);

  /**
   * How long a new consumer looks for records left in the queue: the whole of it whenever one is
   * left, as here; time to join the group and fetch, and far short of {@link #LOCK}.
   */
  static final Duration LOOK = Duration.ofSeconds(8);

  static final Duration WAIT = Duration.ofSeconds(60);

  /** A container whose consumer factory, once consumer-dedup wrapped it, the test can reach. */
  static final class Container extends ShareKafkaMessageListenerContainer<String, String> {
    Container(ShareConsumerFactory<String, String> factory) {
      super(factory, new ContainerProperties(TOPIC));
    }

    ShareConsumerFactory<String, String> consumers() {
      return shareConsumerFactory;
    }
  }

  /**
   * The user sees the Error reach the container, and the record the closed consumer held acquired
   * again by another consumer at once, not after its lock ran out.
   */
  @Test
  void anErrorAsTheListenerFinishesStillClosesTheConsumer() throws Exception {
    TestKafka.createTopics(1, TOPIC);
    TestShareGroups.configure(TOPIC, LOCK);
    try (KafkaProducer<String, String> producer = TestKafka.producer()) {
      producer.send(new ProducerRecord<>(TOPIC, "charge 3.00")).get();
    }
    Map<String, Object> config = TestShareGroups.consumerConfig(TOPIC);
    // Closed unacknowledged, a record goes back to the queue (implicitly, it would be accepted).
    config.put("share.acknowledgement.mode", "explicit");
    Container container = new Container(new DefaultShareConsumerFactory<>(config));
    WrappedShareConsumers.apply(
        container,
        closing -> {
          throw new OutOfMemoryError("Java heap space (as the listener finishes)");
        },
        WAIT);
    ShareConsumer<String, String> consumer =
        container.consumers().createShareConsumer(TOPIC, "closing-with-an-error");
    consumer.subscribe(List.of(TOPIC));
    assertThat(acquired(consumer)).as("records the consumer acquired").hasSize(1);

    assertThatThrownBy(consumer::close)
        .as("[the Error reaches the container] close")
        .isInstanceOf(OutOfMemoryError.class);

    // A new consumer takes each record given back again and again within the look, a delivery
    // each time: the first it takes is the record's second delivery.
    List<ConsumerRecord<String, String>> left = TestShareGroups.remaining(TOPIC, TOPIC, LOOK);
    assertThat(left)
        .as(
            "[the record the closed consumer held, acquirable again at once rather than locked for"
                + " %s] deliveries a new consumer acquires within %s",
            LOCK, LOOK)
        .extracting(record -> (int) record.deliveryCount().orElse((short) 0))
        .startsWith(2);
  }

  /**
   * The container closes a consumer holding a record, the broker no longer answering: spring-kafka
   * closes it with {@code close()}, kafka-clients' 30 s, so the container's stop took the close
   * timeout (for the handler in hand) and 30 s more. Now the close is bounded by the close timeout.
   */
  @Test
  void theConsumerCloseIsBoundedByTheCloseTimeoutThoughTheBrokerNoLongerAnswers() throws Exception {
    Duration closeTimeout = Duration.ofSeconds(2);
    KafkaClusterTestKit broker = TestKafka.startOwn();
    try {
      String bootstrap = broker.bootstrapServers();
      String topic = TOPIC + "-unanswered";
      TestShareGroups.createQueue(bootstrap, topic, topic);
      Map<String, Object> producerConfig = new HashMap<>();
      producerConfig.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
      try (KafkaProducer<String, String> producer =
          new KafkaProducer<>(producerConfig, new StringSerializer(), new StringSerializer())) {
        producer.send(new ProducerRecord<>(topic, "charge 4.00")).get();
      }
      Map<String, Object> config = TestShareGroups.consumerConfig(topic);
      config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
      config.put("share.acknowledgement.mode", "explicit");
      Container container = new Container(new DefaultShareConsumerFactory<>(config));
      WrappedShareConsumers.apply(container, closing -> {}, closeTimeout);
      ShareConsumer<String, String> consumer =
          container.consumers().createShareConsumer(topic, "closing-unanswered");
      consumer.subscribe(List.of(topic));
      assertThat(acquired(consumer)).as("records the consumer acquired").hasSize(1);

      TestKafka.stopAnswering(broker);
      long started = System.nanoTime();
      consumer.close();
      Duration took = Duration.ofNanos(System.nanoTime() - started);

      assertThat(took)
          .as(
              "[bounded by the close timeout of %s, not kafka-clients' 30 s] close took",
              closeTimeout)
          .isLessThan(closeTimeout.plusSeconds(5));
    } finally {
      TestKafka.closeUnanswering(broker);
    }
  }

  private static List<ConsumerRecord<String, String>> acquired(
      ShareConsumer<String, String> consumer) {
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (System.nanoTime() - deadline < 0) {
      List<ConsumerRecord<String, String>> records = new ArrayList<>();
      consumer.poll(Duration.ofMillis(500)).forEach(records::add);
      if (!records.isEmpty()) {
        return records;
      }
    }
    return List.of();
  }
}
