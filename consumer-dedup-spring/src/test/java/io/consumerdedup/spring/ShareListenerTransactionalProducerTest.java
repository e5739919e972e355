package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.testing.TestShareGroups;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An application whose producers are transactional ({@code spring.kafka.producer.
 * transaction-id-prefix} set, for its consumer-group listeners) and which has an
 * {@code @Idempotent} share listener: consumer-dedup writes that listener's dead letters with a
 * producer of the application's {@code ProducerFactory}, outside any transaction. Spring Boot 4.0
 * refuses share listeners, so the boot40 module leaves this class out.
 */
@SpringBootTest(
    classes = ShareListenerTransactionalProducerTest.App.class,
    properties = {
      "spring.kafka.producer.transaction-id-prefix=share-dlt-tx-",
      "consumer-dedup.max-attempts=1"
    })
@DirtiesContext
class ShareListenerTransactionalProducerTest {
  static final String TOPIC = "share-tx-producer";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_txp", TOPIC, TOPIC + "-dlt");
    TestShareGroups.configure(TOPIC, Duration.ofSeconds(3));
  }

  @Autowired KafkaTemplate<String, String> template;

  /**
   * A record whose listener fails on its one attempt: the user sees it in the dead-letter topic,
   * and rejected (not in the queue any more), although the application's producers are
   * transactional.
   */
  @Test
  void aFailedRecordIsDeadLetteredWhenTheApplicationsProducersAreTransactional() throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(TOPIC, "charge 5.00");
    record.headers().add("order-no", "T-1".getBytes(StandardCharsets.UTF_8));
    template.executeInTransaction(t -> t.send(record)).get();

    List<ConsumerRecord<String, String>> deadLetters =
        readTopic(TOPIC + "-dlt", 1, Duration.ofSeconds(10));
    assertThat(deadLetters).as("dead letters of T-1").hasSize(1);
    assertThat(header(deadLetters.get(0), "order-no")).isEqualTo("T-1");
    assertThat(TestShareGroups.remaining(TOPIC, TOPIC, Duration.ofSeconds(2))).isEmpty();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.stringShareFactory();
    }

    @Bean
    Listener listener() {
      return new Listener();
    }
  }

  static class Listener {
    @Idempotent(bizType = "tx-producer", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void charge(ConsumerRecord<String, String> record) {
      throw new IllegalStateException("card declined");
    }
  }
}
