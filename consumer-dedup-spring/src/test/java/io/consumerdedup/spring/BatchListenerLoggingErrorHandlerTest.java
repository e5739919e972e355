package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.time.Duration;
import java.util.List;
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
import org.springframework.kafka.listener.CommonLoggingErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.test.utils.ContainerTestUtils;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A batch listener with an error handler that does not seek ({@code CommonLoggingErrorHandler},
 * which would have the container commit the whole batch): a record without key in the middle of a
 * batch is logged once, and the records after it, which the listener never got, are not lost.
 */
@SpringBootTest(classes = BatchListenerLoggingErrorHandlerTest.App.class)
@DirtiesContext
class BatchListenerLoggingErrorHandlerTest {
  static final Duration WAIT = Duration.ofSeconds(30);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_batch_log", "btl-orders");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired MeterRegistry registry;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void recordsAfterAKeylessRecordAreNotLost() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer("btl-orders");
    ContainerTestUtils.waitForAssignment(container, 1);
    container.stop();
    send(template, "btl-orders", "before", "order-no", "L-1");
    send(template, "btl-orders", "without key");
    send(template, "btl-orders", "after", "order-no", "L-2");
    send(template, "btl-orders", "after", "order-no", "L-3");
    container.start();

    await().atMost(WAIT).until(() -> committed() == 4);
    for (String key : List.of("L-1", "L-2", "L-3")) {
      await().atMost(WAIT).until(() -> SpringTestEnvironment.effects(jdbc, "logged", key) == 1);
    }
    assertThat(SpringTestEnvironment.effects(jdbc, "logged", "")).isZero();
    assertThat(SpringTestEnvironment.outcomes(registry, "logged", "missing_key")).isEqualTo(1);
  }

  private long committed() throws Exception {
    return SpringTestEnvironment.committed("btl-orders", "btl-orders", 0);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    SimpleMeterRegistry meterRegistry() {
      return new SimpleMeterRegistry();
    }

    @Bean
    CommonLoggingErrorHandler errorHandler() {
      return new CommonLoggingErrorHandler();
    }

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

    @Idempotent(bizType = "logged", header = "order-no")
    @KafkaListener(id = "btl-orders", topics = "btl-orders", batch = "true")
    public void onBatch(List<ConsumerRecord<String, String>> records) {
      for (ConsumerRecord<String, String> record : records) {
        SpringTestEnvironment.effect(jdbc, "logged", header(record, "order-no"), record.value());
      }
    }
  }
}
