package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.spring.IdempotentExecutors;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Lazy;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.messaging.handler.annotation.Header;

/**
 * {@code spring.main.lazy-initialization=true}, a common setting for a shorter start-up, makes
 * every bean lazy that nothing asks for at start-up: consumer-dedup's start-up checks and its
 * janitor are beans nothing else asks for, so a misspelt property, a missing table went unnoticed
 * again and expired rows were never deleted.
 */
class LazyInitializationTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String TOPIC = "lazy-orders";
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();

  private String schema;

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("lazy_init");
  }

  @AfterEach
  void tearDown() {
    TestDatabase.dropSchema(schema);
  }

  @Test
  void aMisspeltPropertyStopsALazyApplication() {
    assertThatThrownBy(() -> start("consumer-dedup.dedup-mode=TRANSACTIONAL").close())
        .rootCause()
        .hasMessageContaining("consumer-dedup.dedup-mode=TRANSACTIONAL")
        .hasMessageContaining("Did you mean consumer-dedup.mode?");
  }

  @Test
  void aBadPropertyValueStopsALazyApplication() {
    assertThatThrownBy(() -> start("consumer-dedup.lease=-5s").close())
        .rootCause()
        .hasMessageContaining("consumer-dedup.lease=-5s is not allowed");
  }

  @Test
  void aForgottenTableStopsALazyApplication() {
    String table = "forgotten_" + schema;
    assertThatThrownBy(() -> start("consumer-dedup.table-name=" + table).close())
        .rootCause()
        .hasMessageContaining("The dedup table " + table + " does not exist");
  }

  @Test
  void theJanitorRunsInALazyApplication() {
    try (ConfigurableApplicationContext context = start("consumer-dedup.cleanup.enabled=true")) {
      assertThat(context.getBeanFactory().containsSingleton("dedupJanitor"))
          .as("the janitor was started with the application")
          .isTrue();
    }
  }

  @Test
  void aDuplicateRecordIsAppliedOnceInALazyApplication() throws Exception {
    TestKafka.createTopics(1, TOPIC);
    try (ConfigurableApplicationContext context =
        start(
            "spring.kafka.bootstrap-servers=" + TestKafka.bootstrapServers(),
            "spring.kafka.consumer.auto-offset-reset=earliest")) {
      try (KafkaProducer<String, String> producer = TestKafka.producer()) {
        for (int i = 0; i < 2; i++) {
          ProducerRecord<String, String> record = new ProducerRecord<>(TOPIC, "charge 5.00");
          record.headers().add("order-no", "L-1".getBytes(StandardCharsets.UTF_8));
          producer.send(record).get();
        }
      }
      var store = context.getBean(IdempotentExecutors.class).store();
      await()
          .atMost(WAIT)
          .until(
              () ->
                  store.find(DedupKey.of("lazy", "L-1")).map(DedupRecord::status).orElse(null)
                      == DedupStatus.SUCCESS);
      await().during(Duration.ofSeconds(2)).atMost(WAIT).until(() -> true);
    }
    assertThat(effects.get("L-1")).as("times the record was applied").hasValue(1);
  }

  private ConfigurableApplicationContext start(String... properties) {
    List<String> all =
        new ArrayList<>(
            List.of(
                "spring.main.lazy-initialization=true",
                "spring.datasource.url=" + TestDatabase.url(schema),
                "spring.datasource.hikari.maximum-pool-size=4",
                "consumer-dedup.cleanup.enabled=false",
                "spring.main.banner-mode=off",
                "spring.main.web-application-type=none"));
    all.addAll(List.of(properties));
    return new SpringApplicationBuilder(App.class).properties(all.toArray(String[]::new)).run();
  }

  static class Listener {
    @Idempotent(bizType = "lazy", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    void onOrder(String payload, @Header("order-no") String orderNo) {
      effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    // A listener bean made lazy is never created, and spring-kafka never starts its container:
    // an application that uses lazy initialization keeps its listeners eager.
    @Bean
    @Lazy(false)
    Listener listener() {
      return new Listener();
    }
  }
}
