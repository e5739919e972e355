package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
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
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * Ack mode {@code MANUAL}: an {@code @Idempotent} listener that acknowledges its record, then nacks
 * it (a step after the acknowledgment failed, and it asks for a redelivery). spring-kafka commits
 * what was acknowledged before it seeks the nacked record back: with the container stopped during
 * the nack's sleep, the record, its key FAILED, never came again. A real PostgreSQL and the in-JVM
 * broker.
 */
@SpringBootTest(
    classes = AcknowledgeThenNackTest.App.class,
    properties = "spring.kafka.listener.ack-mode=manual")
@DirtiesContext
class AcknowledgeThenNackTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String TOPIC = "ack-then-nack";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_ack_then_nack", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry registry;

  @Test
  void aRecordAcknowledgedThenNackedIsStillDeliveredAfterTheContainerStopsDuringTheNack()
      throws Exception {
    MessageListenerContainer container = registry.getListenerContainer(TOPIC);
    long offset = SpringTestEnvironment.send(template, TOPIC, "credit 4", "order-no", "AN-1");

    Switches.nacked.await();
    await()
        .atMost(WAIT)
        .until(
            () ->
                store.find(DedupKey.of("ack-then-nack", "AN-1")).orElseThrow().status()
                    == DedupStatus.FAILED);
    // The container sleeps the nack's 10 s before the redelivery: stopped meanwhile.
    container.stop();
    assertThat(SpringTestEnvironment.effects(jdbc, TOPIC, "AN-1")).isZero();
    assertThat(SpringTestEnvironment.committed(TOPIC, TOPIC, 0))
        .as("the group's committed offset, its record (offset %d) nacked and never applied", offset)
        .isLessThanOrEqualTo(offset);

    container.start();
    await()
        .atMost(WAIT)
        .alias("effect of AN-1 after the restart")
        .until(() -> SpringTestEnvironment.effects(jdbc, TOPIC, "AN-1") == 1);
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(TOPIC, TOPIC, 0) > offset);
    assertThat(Switches.calls).as("the nacked call, then the one after the restart").hasValue(2);
  }

  static final class Switches {
    static final AtomicInteger calls = new AtomicInteger();
    static final CountDownLatch nacked = new CountDownLatch(1);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }
  }

  static class Listeners {
    final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    /** The first call acknowledges, then nacks for a redelivery 10 s later. */
    @Idempotent(bizType = "ack-then-nack", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public void on(ConsumerRecord<String, String> record, Acknowledgment ack) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      ack.acknowledge();
      if (Switches.calls.incrementAndGet() == 1) {
        ack.nack(Duration.ofSeconds(10));
        Switches.nacked.countDown();
        return;
      }
      SpringTestEnvironment.effect(jdbc, TOPIC, orderNo, record.value());
    }
  }
}
