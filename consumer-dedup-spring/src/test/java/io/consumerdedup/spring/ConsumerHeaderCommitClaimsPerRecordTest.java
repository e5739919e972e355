package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.committed;
import static io.consumerdedup.spring.SpringTestEnvironment.effect;
import static io.consumerdedup.spring.SpringTestEnvironment.effects;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStore;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.Consumer;
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
import org.springframework.kafka.listener.CommonContainerStoppingErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.KafkaHeaders;
import org.springframework.messaging.Message;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * {@code consumer-dedup.claims-per-poll=false}, the containers' consumers left as they are: a
 * record listener taking its {@code Message<?>} commits through the consumer its headers carry
 * ({@code KafkaHeaders.CONSUMER}), then fails, which stops its container, as a process dying before
 * the retry would. Started again, the record must come again and be applied once, not be skipped
 * past an offset committed by a call that failed. The default ack mode (BATCH). A real PostgreSQL
 * and the in-JVM broker.
 */
@SpringBootTest(
    classes = ConsumerHeaderCommitClaimsPerRecordTest.App.class,
    properties = "consumer-dedup.claims-per-poll=false")
@DirtiesContext
class ConsumerHeaderCommitClaimsPerRecordTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String TOPIC = "hdrcons-orders";
  static final AtomicInteger calls = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "hdrcons", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void aRecordCommittedThroughTheConsumerHeaderThenFailingIsAppliedAfterARestart()
      throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    long offset = send(template, TOPIC, "credit 5", "order-no", "C-1");

    await().atMost(WAIT).until(() -> !container.isRunning());
    assertThat(calls).as("calls before the stop").hasValue(1);
    assertThat(committed(TOPIC, TOPIC, 0))
        .as(
            "the group's committed offset, its record (offset %d) committed by a call that failed"
                + " (key %s)",
            offset, store.find(DedupKey.of(TOPIC, "C-1")).map(DedupRecord::status).orElse(null))
        .isLessThanOrEqualTo(offset);

    container.start();
    await()
        .atMost(WAIT)
        .alias("effect of C-1 after the restart")
        .until(() -> effects(jdbc, TOPIC, "C-1") == 1);
    await().atMost(WAIT).until(() -> committed(TOPIC, TOPIC, 0) > offset);
    assertThat(calls).as("the failed call, then the one after the restart").hasValue(2);
    assertThat(effects(jdbc, TOPIC, "C-1")).as("C-1 applied").isEqualTo(1);
  }

  static class Orders {
    final JdbcTemplate jdbc;

    Orders(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = TOPIC, header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public void onOrder(Message<String> message) {
      ((Consumer<?, ?>) message.getHeaders().get(KafkaHeaders.CONSUMER)).commitSync();
      if (calls.incrementAndGet() == 1) {
        throw new IllegalStateException("a step after the commit failed");
      }
      byte[] orderNo = (byte[]) message.getHeaders().get("order-no");
      effect(jdbc, TOPIC, new String(orderNo, StandardCharsets.UTF_8), message.getPayload());
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Orders orders(JdbcTemplate jdbc) {
      return new Orders(jdbc);
    }

    /** A failure stops the container. */
    @Bean
    CommonContainerStoppingErrorHandler errorHandler() {
      return new CommonContainerStoppingErrorHandler();
    }
  }
}
