package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.committed;
import static io.consumerdedup.spring.SpringTestEnvironment.effect;
import static io.consumerdedup.spring.SpringTestEnvironment.effects;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.internal.FaultPoints;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
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
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An {@code Error} that passes (memory short for a moment) strikes both tries to hand over the
 * SUCCESS of an {@code @Idempotent} record listener that returned, at the library's defaults: no
 * error handler of the application, Boot's auto-configuration, claims per poll. The claim's outcome
 * is tried once more as it was, and the record's redelivery must be skipped as a duplicate: its
 * effect applied once. The application starts the container again if the Error stopped it, as after
 * a restart. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = RecordListenerPassingHandOverErrorTest.App.class)
@DirtiesContext
class RecordListenerPassingHandOverErrorTest {
  static final String TOPIC = "phe-defaults";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_passing_handover", TOPIC);
    registry.add("consumer-dedup.lease", () -> "2s");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired KafkaListenerEndpointRegistry containers;
  @Autowired JdbcTemplate jdbc;
  @Autowired DeliveryCounter<Long> deliveries;

  @AfterEach
  void noMoreErrors() {
    FaultPoints.install(null);
  }

  @Test
  void aSuccessWhoseHandOverMetAnErrorThatPassedIsADuplicateOnRedelivery() throws Exception {
    AtomicInteger struck = new AtomicInteger();
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.ENDING
              && Listener.calls.get() > 0
              && Thread.currentThread().getName().startsWith(TOPIC)
              && struck.get() < 2) {
            struck.incrementAndGet();
            throw new OutOfMemoryError("Java heap space, handing the outcome over");
          }
        });
    long offset = send(template, TOPIC, "payload of PHE-1", "order-no", "PHE-1");
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    container.start();
    await("the Error at both tries to hand the SUCCESS over")
        .atMost(Duration.ofSeconds(20))
        .until(() -> struck.get() == 2);
    // The application starts the container again if the Error stopped it.
    await("the record delivered again and committed")
        .atMost(Duration.ofSeconds(30))
        .pollInterval(Duration.ofMillis(200))
        .until(
            () -> {
              if (!container.isRunning()) {
                container.start();
              }
              return deliveries.of(offset) >= 2 && committed(TOPIC, TOPIC, 0) > offset;
            });
    container.stop();

    assertThat(struck).as("tries to hand the SUCCESS over that met the Error").hasValue(2);
    assertThat(effects(jdbc, TOPIC, "PHE-1")).as("effects of PHE-1").isEqualTo(1);
    assertThat(
            jdbc.queryForObject(
                "SELECT status FROM consumer_dedup WHERE biz_key = 'PHE-1'", String.class))
        .as("the key's record")
        .isEqualTo("SUCCESS");
  }

  static class Listener {
    static final AtomicInteger calls = new AtomicInteger();
    private final JdbcTemplate jdbc;

    Listener(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = TOPIC, header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, autoStartup = "false")
    void apply(String payload, @Header("order-no") String orderNo) {
      calls.incrementAndGet();
      effect(jdbc, TOPIC, orderNo, payload);
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    DeliveryCounter<Long> deliveries() {
      return new DeliveryCounter<>(record -> record.offset());
    }

    @Bean
    Listener listener(JdbcTemplate jdbc) {
      return new Listener(jdbc);
    }
  }
}
