package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.BatchInterceptor;
import org.springframework.kafka.listener.BatchListenerFailedException;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.adapter.RecordFilterStrategy;
import org.springframework.messaging.Message;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * {@code @Idempotent} batch listeners behind a record filter ({@code @KafkaListener(filter =
 * ...)}): spring-kafka filters the batch after the container polled it and its batch interceptors
 * saw it, so the listener gets fewer records than the container holds. Each message must still be
 * matched to its own record, and a failure must name the record it failed at, not the one at the
 * same index of the container's batch. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = BatchRecordFilterTest.App.class)
@DirtiesContext
class BatchRecordFilterTest {
  static final Duration WAIT = Duration.ofSeconds(15);
  static final String TOPIC = "bmf-orders";
  static final String FAILING = "bmf-failing";
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();
  static final List<String> batchFailures = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry, "batch_record_filter", TOPIC, FAILING, FAILING + "-dlt");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void messagesLeftByTheFilterAreMatchedToTheirOwnRecords() throws Exception {
    SpringTestEnvironment.send(template, TOPIC, "apply", "order-no", "F-1");
    SpringTestEnvironment.send(template, TOPIC, "skip", "order-no", "F-2");
    SpringTestEnvironment.send(template, TOPIC, "apply", "order-no", "F-3");
    containers.getListenerContainer(TOPIC).start();
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> {
              assertThat(batchFailures).as("batch failures").isEmpty();
              assertThat(status("F-1")).as("F-1 status").isEqualTo(DedupStatus.SUCCESS);
              assertThat(status("F-3")).as("F-3 status").isEqualTo(DedupStatus.SUCCESS);
            });
    assertThat(effects.get("F-1")).as("F-1 applied").hasValue(1);
    assertThat(effects.get("F-3")).as("F-3 applied").hasValue(1);
    assertThat(effects.get("F-2")).as("F-2, filtered out, applied").isNull();
    assertThat(status("F-2")).as("F-2, filtered out, recorded").isNull();
  }

  @Test
  void aFailureIsReportedAtTheRecordItHappenedAtNotAtItsIndexInThePolledBatch() throws Exception {
    SpringTestEnvironment.send(template, FAILING, "apply", "order-no", "C-1");
    SpringTestEnvironment.send(template, FAILING, "skip", "order-no", "C-2");
    SpringTestEnvironment.send(template, FAILING, "apply", "order-no", "C-3");
    SpringTestEnvironment.send(template, FAILING, "fail", "order-no", "C-4");
    containers.getListenerContainer(FAILING).start();
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(FAILING, FAILING, 0) == 4);
    List<ConsumerRecord<String, String>> deadLetters =
        SpringTestEnvironment.readTopic(FAILING + "-dlt", 2, Duration.ofSeconds(3));
    assertThat(deadLetters)
        .extracting(record -> SpringTestEnvironment.header(record, "order-no"))
        .as("dead letters")
        .containsExactly("C-4");
    assertThat(effects.get("C-1")).as("C-1 applied").hasValue(1);
    assertThat(effects.get("C-3")).as("C-3 applied").hasValue(1);
    assertThat(status("bmf-failing", "C-3")).as("C-3 status").isEqualTo(DedupStatus.SUCCESS);
    assertThat(status("bmf-failing", "C-4")).as("C-4 status").isEqualTo(DedupStatus.FAILED);
  }

  private DedupStatus status(String orderNo) {
    return status("bmf", orderNo);
  }

  private DedupStatus status(String bizType, String orderNo) {
    return store.find(DedupKey.of(bizType, orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listener {
    @Idempotent(bizType = "bmf", header = "order-no")
    @KafkaListener(
        id = TOPIC,
        topics = TOPIC,
        batch = "true",
        filter = "skipMarked",
        autoStartup = "false")
    public void onOrders(List<Message<String>> messages) {
      for (Message<String> message : messages) {
        Object key = message.getHeaders().get("order-no");
        String orderNo =
            key instanceof byte[] bytes
                ? new String(bytes, StandardCharsets.UTF_8)
                : String.valueOf(key);
        effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      }
    }
  }

  static class FailingListener {
    @Idempotent(bizType = "bmf-failing", header = "order-no")
    @KafkaListener(
        id = FAILING,
        topics = FAILING,
        batch = "true",
        filter = "skipMarked",
        autoStartup = "false")
    public void onOrders(List<ConsumerRecord<String, String>> records) {
      for (int i = 0; i < records.size(); i++) {
        ConsumerRecord<String, String> record = records.get(i);
        if ("fail".equals(record.value())) {
          throw new BatchListenerFailedException(
              "declined", new IllegalStateException("declined"), i);
        }
        effects
            .computeIfAbsent(
                SpringTestEnvironment.header(record, "order-no"), k -> new AtomicInteger())
            .incrementAndGet();
      }
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    RecordFilterStrategy<Object, Object> skipMarked() {
      return record -> "skip".equals(record.value());
    }

    @Bean
    BatchInterceptor<Object, Object> batchFailures() {
      return SpringTestEnvironment.batchFailureRecorder(batchFailures);
    }

    /** A failed record is dead-lettered at once. */
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      return SpringTestEnvironment.deadLettering(template, 0, 0);
    }

    @Bean
    FailingListener failingListener() {
      return new FailingListener();
    }

    @Bean
    Listener listener() {
      return new Listener();
    }
  }
}
