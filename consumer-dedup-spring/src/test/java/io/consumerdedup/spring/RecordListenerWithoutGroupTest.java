package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.spring.internal.PollAwareConsumer;
import java.time.Duration;
import java.util.Map;
import java.util.NavigableMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.annotation.TopicPartition;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.ConcurrentMessageListenerContainer;
import org.springframework.kafka.test.utils.KafkaTestUtils;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * Claims per poll, a listener of no consumer group (partitions assigned by hand, no {@code
 * group.id}: every instance reads every record, and the dedup table lets one apply each key).
 * spring-kafka then commits no offset at all, so nothing ever passes the records' SUCCESS marks:
 * the consumer must not keep each written mark for a commit that never comes, one more for every
 * record, for as long as it runs. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = RecordListenerWithoutGroupTest.App.class)
@DirtiesContext
class RecordListenerWithoutGroupTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String TOPIC = "ng-orders";
  static final int RECORDS = 2_000;
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "no_group", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void theSuccessMarksWrittenAreNotKeptForACommitThatNeverComes() throws Exception {
    for (int i = 0; i < RECORDS; i++) {
      ProducerRecord<String, String> record = new ProducerRecord<>(TOPIC, "payload " + i);
      record.headers().add("order-no", ("NG-" + i).getBytes());
      template.send(record);
    }
    template.flush();
    await().atMost(WAIT).until(() -> effects.size() == RECORDS);
    // One poll more, with a record, after every mark of the others is written.
    Thread.sleep(500);
    SpringTestEnvironment.send(template, TOPIC, "payload last", "order-no", "NG-last");
    await().atMost(WAIT).until(() -> effects.containsKey("NG-last"));

    assertThat(effects.values()).allSatisfy(count -> assertThat(count.get()).isEqualTo(1));
    assertThat(marksListed())
        .as("SUCCESS marks the consumer still lists after %d records", RECORDS + 1)
        .isLessThan(RECORDS / 4);
  }

  /** The marks the container's consumer lists to hold its offset commits back. */
  private int marksListed() {
    var container =
        (ConcurrentMessageListenerContainer<?, ?>) containers.getListenerContainer(TOPIC);
    Object consumer =
        KafkaTestUtils.getPropertyValue(
            container.getContainers().get(0), "listenerConsumer.consumer");
    Object marks = ((PollAwareConsumer<?, ?>) consumer).poll().marks();
    @SuppressWarnings("unchecked")
    Map<Object, NavigableMap<Long, ?>> byPartition =
        (Map<Object, NavigableMap<Long, ?>>) KafkaTestUtils.getPropertyValue(marks, "marks");
    synchronized (marks) {
      return byPartition.values().stream().mapToInt(Map::size).sum();
    }
  }

  static class Listener {
    @Idempotent(bizType = "no-group", header = "order-no")
    @KafkaListener(
        id = TOPIC,
        idIsGroup = false,
        topicPartitions = @TopicPartition(topic = TOPIC, partitions = "0"))
    void onOrder(String payload, @Header("order-no") String orderNo) {
      effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listener listener() {
      return new Listener();
    }
  }
}
