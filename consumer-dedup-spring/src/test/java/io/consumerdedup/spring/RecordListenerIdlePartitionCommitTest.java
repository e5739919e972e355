package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
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
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.SendResult;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * Claims per poll: a partition whose last records' offsets could not be committed when the
 * container committed them (a SUCCESS mark not written yet) is committed once the marks are
 * written, although the consumer stays busy with another partition and never polls empty. Before,
 * that partition was committed only once the whole consumer polled nothing: under steady traffic on
 * another partition its lag never reached zero, and a rebalance or restart delivered its records
 * again. A real PostgreSQL (a trigger refuses a SUCCESS mark for a while) and the in-JVM broker.
 */
@SpringBootTest(classes = RecordListenerIdlePartitionCommitTest.App.class)
@DirtiesContext
class RecordListenerIdlePartitionCommitTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String TOPIC = "ipc-orders";
  static final int BACKLOG = 5000;
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    String schema =
        SpringTestEnvironment.prepare(
            registry, "idle_partition", java.util.function.UnaryOperator.identity(), 2, TOPIC);
    // The database refuses the SUCCESS of the keys listed, as a transient failure.
    SpringTestEnvironment.refuseListedSuccesses(schema);
    registry.add("consumer-dedup.store.retry-max-attempts", () -> "1");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void aPartitionIsCommittedOnceItsMarksAreWrittenWhileAnotherKeepsTheConsumerBusy()
      throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    await().atMost(WAIT).until(() -> container.getAssignedPartitions().size() == 2);
    jdbc.update("INSERT INTO mark_faults (biz_key) VALUES ('Q-2')");
    for (int i = 0; i < 3; i++) {
      send(1, "Q-" + i).get();
    }
    // The SUCCESS of partition 1's last record is refused: nothing is committed past it.
    await().atMost(WAIT).until(() -> applied("Q-2") == 1 && faultHits() > 0);
    assertThat(committed(1)).isLessThanOrEqualTo(2);

    // A backlog keeps the consumer busy with partition 0: every poll returns records.
    container.pause();
    await().atMost(WAIT).until(container::isContainerPaused);
    List<CompletableFuture<SendResult<String, String>>> sent = new ArrayList<>();
    for (int i = 0; i < BACKLOG; i++) {
      sent.add(send(0, "P-" + i));
    }
    CompletableFuture.allOf(sent.toArray(CompletableFuture[]::new)).get();
    container.resume();
    await().atMost(WAIT).until(() -> appliedWithPrefix("P-") > 0);

    jdbc.update("DELETE FROM mark_faults");
    await().atMost(WAIT).until(() -> status("Q-2") == DedupStatus.SUCCESS);
    await().atMost(WAIT).until(() -> committed(1) == 3);
    int backlogApplied = appliedWithPrefix("P-");
    assertThat(backlogApplied)
        .as("records of partition 0 applied when partition 1 was committed")
        .isLessThan(BACKLOG);

    await().atMost(WAIT).until(() -> appliedWithPrefix("P-") == BACKLOG);
    await().atMost(WAIT).until(() -> committed(0) == BACKLOG);
    effects.forEach((key, count) -> assertThat(count.get()).as(key).isEqualTo(1));
    assertThat(
            jdbc.queryForObject(
                "SELECT count(*) FROM consumer_dedup WHERE status = 'PROCESSING'", Integer.class))
        .isZero();
  }

  private CompletableFuture<SendResult<String, String>> send(int partition, String orderNo) {
    ProducerRecord<String, String> record =
        new ProducerRecord<>(TOPIC, partition, null, "payload of " + orderNo);
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    return template.send(record);
  }

  private static int applied(String orderNo) {
    AtomicInteger count = effects.get(orderNo);
    return count == null ? 0 : count.get();
  }

  private static int appliedWithPrefix(String prefix) {
    return (int) effects.keySet().stream().filter(key -> key.startsWith(prefix)).count();
  }

  private DedupStatus status(String orderNo) {
    return store.find(DedupKey.of("idle", orderNo)).map(DedupRecord::status).orElse(null);
  }

  private long faultHits() {
    return SpringTestEnvironment.refusedSuccesses(jdbc);
  }

  private static long committed(int partition) throws Exception {
    return SpringTestEnvironment.committed(TOPIC, TOPIC, partition);
  }

  static class Listener {
    @Idempotent(bizType = "idle", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    void onOrder(String payload, @Header("order-no") String orderNo) throws InterruptedException {
      effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      if (orderNo.startsWith("P-")) {
        Thread.sleep(2); // the work of a record: the backlog takes seconds to go through
      }
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
