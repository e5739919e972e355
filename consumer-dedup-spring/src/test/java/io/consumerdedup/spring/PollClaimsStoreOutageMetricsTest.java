package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.effect;
import static io.consumerdedup.spring.SpringTestEnvironment.effects;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.testing.TcpProxy;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.AfterAll;
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
import org.springframework.kafka.listener.RecordInterceptor;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * Claims per poll while the database refuses connections: each delivery of the record that the
 * store failure held back counts one {@code store_failed} outcome. Before, the first delivery
 * counted two, one for the failed claim of its whole poll (which falls back to claiming each record
 * alone) and one for its own claim, so an alert on the count saw more than happened. A real
 * PostgreSQL behind a TCP proxy that refuses connections, and the in-JVM broker.
 */
@SpringBootTest(
    classes = PollClaimsStoreOutageMetricsTest.App.class,
    properties = {
      "spring.datasource.hikari.connection-timeout=500",
      "consumer-dedup.store.retry-max-attempts=1",
      "consumer-dedup.hold.initial-backoff=200ms",
      "consumer-dedup.hold.max-backoff=500ms"
    })
@DirtiesContext
class PollClaimsStoreOutageMetricsTest {
  static final Duration WAIT = Duration.ofSeconds(20);
  static final String TOPIC = "pcsom-orders";
  static final List<String> failures = new CopyOnWriteArrayList<>();
  static TcpProxy proxy;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    proxy = TcpProxy.forPostgres();
    SpringTestEnvironment.prepare(registry, "pcsom", proxy::rewrite, 1, TOPIC);
  }

  @AfterAll
  static void tearDown() {
    proxy.close();
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired MeterRegistry meters;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void eachDeliveryHeldByTheOutageCountsOneStoreFailure() throws Exception {
    await()
        .atMost(WAIT)
        .until(() -> !containers.getListenerContainer(TOPIC).getAssignedPartitions().isEmpty());
    proxy.refuse();
    try {
      send(template, TOPIC, "book", "order-no", "O-1");
      await().atMost(WAIT).until(() -> failures.size() >= 3);
    } finally {
      proxy.pass();
    }
    // The pool finds the database again at its next connection attempt.
    await().atMost(WAIT).ignoreExceptions().until(() -> effects(jdbc, TOPIC, "O-1") == 1);

    assertThat(failures)
        .as("deliveries held by the outage")
        .allSatisfy(failure -> assertThat(failure).contains("DedupStoreUnavailableException"));
    assertThat(SpringTestEnvironment.outcomes(meters, TOPIC, "store_failed"))
        .as("store_failed outcomes, for %s deliveries held", failures.size())
        .isEqualTo(failures.size());
  }

  static class Listener {
    final JdbcTemplate jdbc;

    Listener(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = TOPIC, header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public void onOrder(String payload, @Header("order-no") String orderNo) {
      effect(jdbc, TOPIC, orderNo, payload);
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
    Listener listener(JdbcTemplate jdbc) {
      return new Listener(jdbc);
    }

    @Bean
    RecordInterceptor<Object, Object> failureRecorder() {
      return SpringTestEnvironment.failureRecorder(failures);
    }
  }
}
