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
import java.util.concurrent.CompletableFuture;
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
 * An {@code @Idempotent} listener that commits through the consumer its message carries ({@code
 * KafkaHeaders.CONSUMER}) and calls an {@code @Idempotent} method of another bean with that
 * message, which reaches the same consumer: the listener's commits, before and after that call, are
 * held until the listener's own outcome is settled, whatever the method's call did with its own.
 * {@code consumer-dedup.claims-per-poll=false} (nothing cuts a commit at a mark not written), and a
 * failure stops the container, as a process dying before the retry would. A real PostgreSQL and the
 * in-JVM broker.
 */
@SpringBootTest(
    classes = NestedIdempotentCommitHoldTest.App.class,
    properties = "consumer-dedup.claims-per-poll=false")
@DirtiesContext
class NestedIdempotentCommitHoldTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String AFTER = "nesthold-after";
  static final String BEFORE = "nesthold-before";
  static final String SHIP = "nesthold-ship";
  static final AtomicInteger afterCalls = new AtomicInteger();
  static final CompletableFuture<Exception> earlierCommit = new CompletableFuture<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "nesthold", AFTER, BEFORE);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void aCommitAfterTheInnerCallIsHeldUntilTheListenerFailedSoItsRecordComesAgain()
      throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(AFTER);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    long offset = send(template, AFTER, "credit 5", "order-no", "A-1");

    await().atMost(WAIT).until(() -> !container.isRunning());
    assertThat(afterCalls).as("calls before the stop").hasValue(1);
    assertThat(committed(AFTER, AFTER, 0))
        .as(
            "the group's committed offset, its record (offset %d) committed after the inner call"
                + " by a call that failed (key %s)",
            offset, store.find(DedupKey.of(AFTER, "A-1")).map(DedupRecord::status).orElse(null))
        .isLessThanOrEqualTo(offset);

    container.start();
    await()
        .atMost(WAIT)
        .alias("effect of A-1 after the restart")
        .until(() -> effects(jdbc, AFTER, "A-1") == 1);
    await().atMost(WAIT).until(() -> committed(AFTER, AFTER, 0) > offset);
    assertThat(afterCalls).as("the failed call, then the one after the restart").hasValue(2);
    assertThat(effects(jdbc, SHIP, "A-1")).as("A-1 shipped").isEqualTo(1);
  }

  @Test
  void aCommitBeforeTheInnerCallIsSentOnceTheListenerSucceeded() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(BEFORE);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    send(template, BEFORE, "credit 5", "order-no", "B-1");

    await().atMost(WAIT).until(() -> effects(jdbc, BEFORE, "B-1") == 1);
    assertThat(earlierCommit)
        .as("the callback of the commit the listener made before the inner call")
        .succeedsWithin(WAIT)
        .isNull();
    assertThat(effects(jdbc, SHIP, "B-1")).as("B-1 shipped").isEqualTo(1);
  }

  static class Shipping {
    final JdbcTemplate jdbc;

    Shipping(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = SHIP, header = "order-no")
    public void ship(Message<String> message) {
      effect(jdbc, SHIP, orderNo(message), message.getPayload());
    }
  }

  static class Orders {
    final JdbcTemplate jdbc;
    final Shipping shipping;

    Orders(JdbcTemplate jdbc, Shipping shipping) {
      this.jdbc = jdbc;
      this.shipping = shipping;
    }

    @Idempotent(bizType = AFTER, header = "order-no")
    @KafkaListener(id = AFTER, topics = AFTER)
    public void onAfter(Message<String> message) {
      shipping.ship(message);
      consumer(message).commitSync();
      if (afterCalls.incrementAndGet() == 1) {
        throw new IllegalStateException("a step after the commit failed");
      }
      effect(jdbc, AFTER, orderNo(message), message.getPayload());
    }

    @Idempotent(bizType = BEFORE, header = "order-no")
    @KafkaListener(id = BEFORE, topics = BEFORE)
    public void onBefore(Message<String> message) {
      consumer(message).commitAsync((offsets, e) -> earlierCommit.complete(e));
      shipping.ship(message);
      effect(jdbc, BEFORE, orderNo(message), message.getPayload());
    }

    private static Consumer<?, ?> consumer(Message<String> message) {
      return (Consumer<?, ?>) message.getHeaders().get(KafkaHeaders.CONSUMER);
    }
  }

  private static String orderNo(Message<String> message) {
    return new String((byte[]) message.getHeaders().get("order-no"), StandardCharsets.UTF_8);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Shipping shipping(JdbcTemplate jdbc) {
      return new Shipping(jdbc);
    }

    @Bean
    Orders orders(JdbcTemplate jdbc, Shipping shipping) {
      return new Orders(jdbc, shipping);
    }

    /** A failure stops the container. */
    @Bean
    CommonContainerStoppingErrorHandler errorHandler() {
      return new CommonContainerStoppingErrorHandler();
    }
  }
}
