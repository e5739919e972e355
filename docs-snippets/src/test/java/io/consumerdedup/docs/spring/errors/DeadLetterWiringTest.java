package io.consumerdedup.docs.spring.errors;

import static io.consumerdedup.docs.DocsKafka.committed;
import static io.consumerdedup.docs.DocsKafka.header;
import static io.consumerdedup.docs.DocsKafka.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.docs.DocsDatabase;
import io.consumerdedup.docs.spring.ErrorHandling;
import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.testing.TestKafka;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * docs/spring-boot.md's error handler, the same bean, its waits scaled down by its property (100
 * ms, doubling, instead of 1 s): a record whose listener always throws is tried 5 times, then
 * reaches the dead-letter topic, and the partition moves on to the next record. A back-off without
 * a limit (Spring Framework 7's {@code ExponentialBackOff} has none by default) would retry it
 * forever and hold the partition.
 */
@SpringBootTest(
    classes = DeadLetterWiringTest.App.class,
    properties = "billing.retry.initial-interval=100ms")
@DirtiesContext
class DeadLetterWiringTest {
  @DynamicPropertySource
  static void kafka(DynamicPropertyRegistry registry) {
    TestKafka.createTopics(1, "refunds", "refunds-dlt");
    registry.add("spring.kafka.bootstrap-servers", TestKafka::bootstrapServers);
  }

  @Autowired Refunds refunds;
  @Autowired DedupStore store;

  @Test
  void aRecordThatAlwaysFailsIsDeadLetteredAfterItsRetriesAndThePartitionMovesOn()
      throws Exception {
    long start = System.nanoTime();
    send("refunds", "bounce", "order-no", "RF-1");
    long next = send("refunds", "12.50", "order-no", "RF-2");

    List<ConsumerRecord<String, String>> deadLetters =
        TestKafka.readFromStart("refunds-dlt", 1, Duration.ofSeconds(60));
    assertThat(deadLetters).hasSize(1);
    assertThat(Duration.ofNanos(System.nanoTime() - start))
        .as("retries of 0.1 s, 0.2 s, 0.4 s and 0.8 s")
        .isLessThan(Duration.ofSeconds(30));
    ConsumerRecord<String, String> deadLetter = deadLetters.get(0);
    assertThat(deadLetter.value()).isEqualTo("bounce");
    assertThat(header(deadLetter, "kafka_dlt-exception-message")).contains("the bank refused RF-1");
    assertThat(refunds.calls().stream().filter("RF-1"::equals)).as("attempts of RF-1").hasSize(5);
    DedupRecord failed = store.find(DedupKey.of("refund", "RF-1")).orElseThrow();
    assertThat(failed.status()).isEqualTo(DedupStatus.FAILED);

    await().atMost(Duration.ofSeconds(30)).until(() -> committed("refunds", "refunds") == next + 1);
    assertThat(store.find(DedupKey.of("refund", "RF-2")).orElseThrow().status())
        .isEqualTo(DedupStatus.SUCCESS);
  }

  static class Refunds {
    private final List<String> calls = new CopyOnWriteArrayList<>();

    /** The listener's calls (through the proxy that @Idempotent puts around this bean). */
    List<String> calls() {
      return calls;
    }

    @Idempotent(bizType = "refund", header = "order-no")
    @KafkaListener(topics = "refunds", groupId = "refunds")
    void refund(String amount, @Header("order-no") String orderNo) {
      calls.add(orderNo);
      if (amount.equals("bounce")) {
        throw new IllegalStateException("the bank refused " + orderNo);
      }
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  @Import({ErrorHandling.class, Refunds.class})
  static class App {
    @Bean
    DocsDatabase dataSource() {
      return DocsDatabase.create("docs_dead_letters");
    }
  }
}
