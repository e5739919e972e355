package io.consumerdedup.test.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.test.RedeliveryReport;
import io.consumerdedup.testing.TestDatabase;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.ConcurrentKafkaListenerContainerFactoryConfigurer;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.PlatformTransactionManager;

/**
 * {@link RedeliverEachRecord} on a listener whose container runs each record in a database
 * transaction (a transaction manager on the container, not {@code @Transactional}): the copy comes
 * before that transaction commits and the first delivery's outcome is written, so it meets the key
 * in progress. Not supported; the assertion must say so instead of only that every copy failed.
 */
@SpringBootTest(classes = RedeliverEachRecordContainerTransactionTest.App.class)
@RedeliverEachRecord
@DirtiesContext
class RedeliverEachRecordContainerTransactionTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static String schema;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    schema = BootTestEnvironment.register(registry, "redeliver_container_tx", "rct-payments");
  }

  @AfterAll
  static void dropSchema() {
    TestDatabase.dropSchema(schema);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired RedeliveryReport redelivery;
  @Autowired Listeners listeners;

  @Test
  void theAssertionFailsSayingThatTheCopyCameBeforeTheContainersCommit() throws Exception {
    send("ORD-1");
    send("ORD-2");

    await().atMost(WAIT).until(() -> redelivery.redeliveredCopies() == 2);
    assertThatThrownBy(redelivery::assertNoBodyRanTwice)
        .isInstanceOf(AssertionError.class)
        .hasMessageContaining("Every redelivered copy failed (2 copies)")
        .hasMessageContaining("DedupInProgressException")
        .hasMessageContaining(
            "redelivery testing does not support a listener whose container runs it in a"
                + " transaction");
    assertThat(listeners.charged().values()).allSatisfy(count -> assertThat(count).hasValue(1));
  }

  private void send(String orderNo) throws Exception {
    ProducerRecord<String, String> record =
        new ProducerRecord<>("rct-payments", orderNo, "amount 10");
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    template.send(record).get();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners() {
      return new Listeners();
    }

    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> containerTx(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        PlatformTransactionManager transactionManager) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setTransactionManager(transactionManager);
      return factory;
    }
  }

  static class Listeners {
    private final Map<String, AtomicInteger> charged = new ConcurrentHashMap<>();

    public Map<String, AtomicInteger> charged() {
      return charged;
    }

    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(id = "rct-payments", topics = "rct-payments", containerFactory = "containerTx")
    public void charge(ConsumerRecord<String, String> record) {
      charged.computeIfAbsent(record.key(), k -> new AtomicInteger()).incrementAndGet();
    }
  }
}
