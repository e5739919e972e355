package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStore;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.BatchInterceptor;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A batch listener whose container runs Kafka transactions is not supported: its batch waits,
 * logged with the reason and the remedy, and nothing is claimed, invoked or committed (rather than
 * SUCCESS written before the transaction commits, or offsets committed for a batch that rolls
 * back).
 *
 * <p>Each refusal rolls the container's transaction back, and {@link
 * RetryLaterAfterRollbackProcessor#processBatch}, unlike its record path, records no rollback with
 * consumer-dedup: there is nothing to record, since the refusal comes before any key of the batch
 * is claimed, however often the batch comes again.
 */
@SpringBootTest(
    classes = BatchListenerTransactionTest.App.class,
    properties = {
      "spring.kafka.producer.transaction-id-prefix=dedup-batch-tx-",
      "spring.kafka.consumer.properties.isolation.level=read_committed",
      "consumer-dedup.hold.initial-backoff=200ms",
      "consumer-dedup.hold.max-backoff=400ms"
    })
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class BatchListenerTransactionTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final List<String> failures = new CopyOnWriteArrayList<>();
  static final AtomicInteger calls = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_batch_tx", "btx-orders");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;

  /**
   * The refusal reaches the after-rollback processor through the error handler that Kafka
   * transactions without one of the application's get, and is held there, each hold one ERROR line
   * whose exception names the listener.
   */
  @Test
  void batchInAKafkaTransactionIsHeldNamingTheListenerAndTheRemedy(CapturedOutput output)
      throws Exception {
    send("book 1", "BTX-1");
    send("book 2", "BTX-2");

    // More rollbacks than the ten attempts of spring-kafka's default processors.
    await().atMost(WAIT).until(() -> failures.size() >= 12);
    String held = "btx-orders-0@0 cannot be handled now";
    List<String> holds = output.getAll().lines().filter(line -> line.contains(held)).toList();
    assertThat(holds).allSatisfy(line -> assertThat(line).contains(" ERROR "));
    assertThat(holds.size()).as("one line per hold").isBetween(1, failures.size());
    assertThat(output.getAll())
        .contains(
            "DedupConfigurationException: @Idempotent batch listener"
                + " io.consumerdedup.spring.BatchListenerTransactionTest$Listeners#book runs in a"
                + " transaction of its container");
    assertThat(failures.get(0))
        .contains(DedupConfigurationException.class.getName())
        .contains("BatchListenerTransactionTest$Listeners#book")
        .contains("runs in a transaction of its container (Kafka's)")
        .contains("make it a record listener");
    assertThat(calls).hasValue(0);
    assertThat(store.find(DedupKey.of("btx", "BTX-1"))).as("no claim to roll back").isEmpty();
    assertThat(store.find(DedupKey.of("btx", "BTX-2"))).as("no claim to roll back").isEmpty();
    assertThat(SpringTestEnvironment.committed("btx-orders", "btx-orders", 0))
        .as("the batch is held, never recovered past")
        .isLessThanOrEqualTo(0);
    assertThat(failures.get(failures.size() - 1))
        .as("still refused, not recovered")
        .contains(DedupConfigurationException.class.getName());
  }

  private void send(String value, String orderNo) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>("btx-orders", value);
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    template.executeInTransaction(t -> t.send(record)).get();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners() {
      return new Listeners();
    }

    /** Records what each failed batch threw, with every cause. */
    @Bean
    BatchInterceptor<Object, Object> failureRecorder() {
      return SpringTestEnvironment.batchFailureRecorder(failures);
    }
  }

  static class Listeners {
    @Idempotent(bizType = "btx", header = "order-no")
    @KafkaListener(id = "btx-orders", topics = "btx-orders", batch = "true")
    public void book(List<ConsumerRecord<String, String>> records) {
      calls.incrementAndGet();
    }
  }
}
