package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.ReplyLosingStore;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A record listener's claim of a poll's keys in one statement commits, and its answer is lost to an
 * {@code Error} (an {@code OutOfMemoryError} as the answer is read). The claims are this process's
 * own, unanswered: each record, claimed alone, is recognised as their holder and applied at once,
 * the container going on. Before, the {@code Error} went up to the container, which stopped: the
 * poll's records were not applied until someone started it again, and a consumer that took the
 * partitions over found their keys in progress for a whole lease. A real PostgreSQL and the in-JVM
 * broker; the store in front of the real one commits the claim and throws the {@code Error}, once.
 */
@SpringBootTest(classes = RecordListenerBatchClaimErrorTest.App.class)
@DirtiesContext
class RecordListenerBatchClaimErrorTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String TOPIC = "bce-orders";
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();
  static ReplyLosingStore losing;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "batch_claim_error", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void aBatchClaimWhoseAnswerIsLostToAnErrorAppliesThePollOnceWithoutStoppingTheContainer()
      throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    container.pause();
    await().atMost(WAIT).until(container::isContainerPaused);
    for (int i = 1; i <= 4; i++) {
      send("B-" + i);
    }
    losing.loseNextClaimReplyTo(
        new OutOfMemoryError("injected: Java heap space, reading the poll's claim answer"));
    container.resume();

    await()
        .atMost(WAIT)
        .alias("the poll's claim answered with the Error")
        .until(() -> losing.repliesLost() == 1);
    await()
        .atMost(WAIT)
        .alias("the poll's four records applied; container running: " + container.isRunning())
        .until(() -> effects.size() == 4);
    assertThat(container.isRunning()).as("the container, after the Error").isTrue();
    effects.forEach((key, count) -> assertThat(count.get()).as(key).isEqualTo(1));
    for (int i = 1; i <= 4; i++) {
      int n = i;
      await().atMost(WAIT).until(() -> status("B-" + n) == DedupStatus.SUCCESS);
    }
  }

  private void send(String orderNo) throws Exception {
    SpringTestEnvironment.send(template, TOPIC, "payload of " + orderNo, "order-no", orderNo);
  }

  private DedupStatus status(String orderNo) {
    return store.find(DedupKey.of("bce", orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listener {
    @Idempotent(bizType = "bce", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
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

    /** The auto-configured store, whose next claim, once armed, commits and throws an Error. */
    @Bean
    DedupStore dedupStore(DataSource dataSource) {
      losing = ReplyLosingStore.in(JdbcDedupStore.builder(dataSource).build());
      return losing.store();
    }
  }
}
