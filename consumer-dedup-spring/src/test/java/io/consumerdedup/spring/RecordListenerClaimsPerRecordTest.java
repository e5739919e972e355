package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * {@code consumer-dedup.claims-per-poll=false}: the path before claims per poll, a claim statement
 * and a SUCCESS statement per record applied (a duplicate is one read), the consumers of the
 * container factory left unwrapped.
 */
@SpringBootTest(
    classes = RecordListenerClaimsPerRecordTest.App.class,
    properties = "consumer-dedup.claims-per-poll=false")
@DirtiesContext
class RecordListenerClaimsPerRecordTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String TOPIC = "pr-orders";
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "per_record", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired StatementCounter statements;
  @Autowired KafkaListenerEndpointRegistry containers;
  @Autowired ConsumerFactory<Object, Object> consumerFactory;

  @Test
  void eachRecordIsClaimedAndMarkedOnItsOwn() throws Exception {
    assertThat(((DefaultKafkaConsumerFactory<Object, Object>) consumerFactory).getPostProcessors())
        .doesNotContain(DedupConsumerPostProcessor.INSTANCE);
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    container.pause();
    await().atMost(WAIT).until(container::isContainerPaused);
    StatementCounter.Counts before = statements.now();
    for (int i = 0; i < 20; i++) {
      send("P-" + i);
      if (i % 2 == 0) {
        send("P-" + i); // a copy: a duplicate
      }
    }
    container.resume();
    await().atMost(WAIT).until(() -> effects.size() == 20);
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> {
              // A claim statement per new key (a duplicate is one read), and a SUCCESS statement
              // per record applied.
              StatementCounter.Counts used = statements.now().since(before);
              assertThat(used.claims()).isEqualTo(20);
              assertThat(used.marks()).isEqualTo(20);
            });
    effects.forEach((key, count) -> assertThat(count.get()).as(key).isEqualTo(1));
    assertThat(statements.now().since(before).releases()).isZero();
  }

  private void send(String orderNo) throws Exception {
    SpringTestEnvironment.send(template, TOPIC, "payload of " + orderNo, "order-no", orderNo);
  }

  static class Orders {
    @Idempotent(bizType = "per-record", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    void apply(String payload, @Header("order-no") String orderNo) {
      effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean(destroyMethod = "close")
    StatementCounter dataSource(@Value("${spring.datasource.url}") String url) {
      return StatementCounter.pool(url);
    }

    @Bean
    Orders orders() {
      return new Orders();
    }
  }
}
