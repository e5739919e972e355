package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.testing.TestKafka;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.ProducerRecord;
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
import org.springframework.kafka.listener.ConcurrentMessageListenerContainer;
import org.springframework.kafka.test.utils.KafkaTestUtils;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An {@code @Idempotent} record listener with {@code concurrency = 3}, claiming per poll at the
 * Boot defaults: three consumer threads, each with its own polls and claims, get copies of the same
 * keys at the same time (each key is sent to two partitions). Each key is applied once, nothing is
 * left PROCESSING, every offset is committed.
 */
@SpringBootTest(classes = RecordListenerConcurrencyTest.App.class)
@DirtiesContext
class RecordListenerConcurrencyTest {
  static final String TOPIC = "conc-orders";
  static final int PARTITIONS = 3;
  static final int KEYS = 300;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "concurrency", s -> s, PARTITIONS, TOPIC);
    registry.add("consumer-dedup.hold.initial-backoff", () -> "100ms");
    registry.add("consumer-dedup.hold.max-backoff", () -> "500ms");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired MeterRegistry registry;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void copiesOfOneKeyInThreePollingThreadsAtOnceAreAppliedOnce() throws Exception {
    // Each consumer thread holds one partition before anything is sent: the group has balanced,
    // so no thread takes every record before the others have joined.
    ConcurrentMessageListenerContainer<?, ?> container =
        (ConcurrentMessageListenerContainer<?, ?>) containers.getListenerContainer(TOPIC);
    await()
        .atMost(Duration.ofSeconds(60))
        .until(
            () ->
                container.getContainers().size() == PARTITIONS
                    && container.getContainers().stream()
                        .allMatch(
                            child ->
                                child.getAssignedPartitions() != null
                                    && child.getAssignedPartitions().size() == 1));
    List<CompletableFuture<?>> sent = new ArrayList<>();
    for (int i = 0; i < KEYS; i++) {
      String orderNo = "C-" + i;
      // The same key on two partitions: two consumer threads hold it in their polls at once.
      sent.add(send(i % PARTITIONS, orderNo));
      sent.add(send((i + 1) % PARTITIONS, orderNo));
    }
    CompletableFuture.allOf(sent.toArray(CompletableFuture[]::new)).get();

    await().atMost(Duration.ofSeconds(90)).until(() -> committed() == 2L * KEYS);

    // A thread runs the listener only for the keys it claims first; it may lose most races.
    assertThat(Listener.threads)
        .as("consumer threads that applied a key")
        .hasSizeGreaterThanOrEqualTo(2);
    assertThat(Listener.applied).hasSize(KEYS);
    assertThat(Listener.applied.values())
        .as("times each key was applied")
        .allSatisfy(count -> assertThat(count.get()).isEqualTo(1));
    double duplicates = SpringTestEnvironment.outcomes(registry, "conc", "duplicate");
    double inProgress = SpringTestEnvironment.outcomes(registry, "conc", "in_progress");
    assertThat(duplicates).as("the second copy of each key").isGreaterThanOrEqualTo(KEYS);
    assertThat(inProgress)
        .as("copies that met their key in progress in another thread (the race happened)")
        .isPositive();
    Integer processing =
        jdbc.queryForObject(
            "SELECT count(*) FROM consumer_dedup WHERE status <> 'SUCCESS'", Integer.class);
    assertThat(processing).as("rows not SUCCESS").isZero();
  }

  private CompletableFuture<?> send(int partition, String orderNo) {
    ProducerRecord<String, String> record =
        new ProducerRecord<>(TOPIC, partition, null, "charge " + orderNo);
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    return template.send(record);
  }

  /** The offsets committed by the listener's group over the three partitions. */
  private static long committed() throws Exception {
    long total = 0;
    for (int partition = 0; partition < PARTITIONS; partition++) {
      OffsetAndMetadata offset =
          KafkaTestUtils.getCurrentOffset(TestKafka.bootstrapServers(), TOPIC, TOPIC, partition);
      total += offset == null ? 0 : offset.offset();
    }
    return total;
  }

  static class Listener {
    static final Map<String, AtomicInteger> applied = new ConcurrentHashMap<>();
    static final Set<String> threads = ConcurrentHashMap.newKeySet();

    @Idempotent(bizType = "conc", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, concurrency = "3")
    public void charge(String payload, @Header("order-no") String orderNo) throws Exception {
      threads.add(Thread.currentThread().getName());
      applied.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      Thread.sleep(1); // the other thread's copy arrives while this one runs
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    SimpleMeterRegistry meterRegistry() {
      return new SimpleMeterRegistry();
    }

    @Bean
    Listener listener() {
      return new Listener();
    }
  }
}
