package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.TopicBuilder;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.RecordInterceptor;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import reactor.core.publisher.Mono;

/**
 * An {@code @Idempotent} listener returning a {@code CompletableFuture} or a {@code Mono}, in a
 * container that runs each record in a Kafka transaction, whose transaction cannot commit after the
 * listener's future completed (the broker refuses a record it sent): its output is discarded, so
 * the redelivery must produce it again, not be skipped as a duplicate of a SUCCESS written before
 * the transaction's end. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(
    classes = AsyncListenerKafkaTransactionTest.App.class,
    properties = {
      "spring.kafka.producer.transaction-id-prefix=dedup-async-tx-",
      "spring.kafka.consumer.properties.isolation.level=read_committed"
    })
@DirtiesContext
class AsyncListenerKafkaTransactionTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String FUTURE = "aktx-future";
  static final String MONO = "aktx-mono";
  static final String SLOW = "aktx-slow";
  static final String RECEIPTS = "aktx-receipts";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "aktx", FUTURE, MONO, SLOW, RECEIPTS);
    registry.add("consumer-dedup.async-listener-timeout", () -> "1s");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;

  @Test
  void aFutureWhoseTransactionFailsToCommitProducesItsOutputAgainOnTheRedelivery()
      throws Exception {
    producesAgainAfterTheAbort(FUTURE, "F-1");
  }

  @Test
  void aMonoWhoseTransactionFailsToCommitProducesItsOutputAgainOnTheRedelivery() throws Exception {
    producesAgainAfterTheAbort(MONO, "M-1");
  }

  /**
   * The wait for the future ends first (the timeout), so the transaction aborts with the receipt;
   * the future completes after that, within the lease: its outcome must not be SUCCESS.
   */
  @Test
  void aFutureCompletingAfterItsTransactionAbortedLeavesItsOutputToTheRedelivery()
      throws Exception {
    long offset = send(SLOW, "S-1");

    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(SLOW, SLOW, 0) > offset);
    assertThat(receipts("read_committed", "S-1"))
        .as("receipts committed for S-1, whose first transaction aborted")
        .hasSize(1);
    assertThat(Switches.calls.get("S-1"))
        .as("the aborted attempt, then the redelivery")
        .hasValue(2);
    assertThat(store.find(DedupKey.of(SLOW, "S-1")).orElseThrow().status())
        .isEqualTo(DedupStatus.SUCCESS);
    assertThat(Switches.failures)
        .as("what the wait that ended threw")
        .anySatisfy(
            failure ->
                assertThat(failure)
                    .contains("The future of ")
                    .contains("the outcome the call reports later is written as FAILED")
                    .doesNotContain("is still written"));
  }

  private void producesAgainAfterTheAbort(String topic, String orderNo) throws Exception {
    long offset = send(topic, orderNo);

    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(topic, topic, 0) > offset);
    // The fault was real: the first receipt was written, and aborted with its transaction.
    assertThat(Switches.calls.get(orderNo)).as("listener calls").isNotNull();
    await().atMost(WAIT).until(() -> receipts("read_uncommitted", orderNo).size() >= 1);
    assertThat(receipts("read_committed", orderNo))
        .as("receipts committed for %s, whose first transaction aborted", orderNo)
        .hasSize(1);
    DedupRecord record = store.find(DedupKey.of(topic, orderNo)).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(Switches.calls.get(orderNo))
        .as("the aborted attempt, then the redelivery")
        .hasValue(2);
  }

  private long send(String topic, String orderNo) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, "order " + orderNo);
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    return template.executeInTransaction(t -> t.send(record)).get().getRecordMetadata().offset();
  }

  private static List<String> receipts(String isolation, String orderNo) {
    return SpringTestEnvironment.readWritten(RECEIPTS, isolation).stream()
        .filter(record -> orderNo.equals(record.key()))
        .map(ConsumerRecord::value)
        .toList();
  }

  static final class Switches {
    static final Map<String, AtomicInteger> calls = new ConcurrentHashMap<>();
    static final List<String> failures = new CopyOnWriteArrayList<>();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners(KafkaTemplate<String, String> template) {
      return new Listeners(template);
    }

    @Bean
    RecordInterceptor<Object, Object> failureRecorder() {
      return SpringTestEnvironment.failureRecorder(Switches.failures);
    }

    /** A topic whose broker refuses records over 200 bytes. */
    @Bean
    NewTopic audit() {
      return TopicBuilder.name("aktx-audit")
          .partitions(1)
          .config("max.message.bytes", "200")
          .build();
    }
  }

  static class Listeners {
    final KafkaTemplate<String, String> template;

    Listeners(KafkaTemplate<String, String> template) {
      this.template = template;
    }

    @Idempotent(bizType = FUTURE, header = "order-no")
    @KafkaListener(id = FUTURE, topics = FUTURE)
    public CompletableFuture<String> future(ConsumerRecord<String, String> record) {
      String orderNo = produce(record);
      return CompletableFuture.supplyAsync(() -> orderNo);
    }

    /** The first call's future completes after the wait for it (1 s), within its lease (3 s). */
    @Idempotent(bizType = SLOW, header = "order-no", lease = "3s")
    @KafkaListener(id = SLOW, topics = SLOW)
    public CompletableFuture<String> slow(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      template.send(RECEIPTS, orderNo, "receipt for " + orderNo);
      int call =
          Switches.calls.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      return call == 1
          ? CompletableFuture.supplyAsync(
              () -> orderNo, CompletableFuture.delayedExecutor(1500, TimeUnit.MILLISECONDS))
          : CompletableFuture.completedFuture(orderNo);
    }

    @Idempotent(bizType = MONO, header = "order-no")
    @KafkaListener(id = MONO, topics = MONO)
    public Mono<String> mono(ConsumerRecord<String, String> record) {
      String orderNo = produce(record);
      return Mono.fromSupplier(() -> orderNo);
    }

    /**
     * Produces a receipt in the container's transaction; on the first attempt also an audit record
     * larger than its topic accepts, so the transaction cannot commit after the listener's future
     * completed.
     */
    private String produce(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      template.send(RECEIPTS, orderNo, "receipt for " + orderNo);
      int call =
          Switches.calls.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      if (call == 1) {
        template.send("aktx-audit", orderNo, "x".repeat(2_000));
      }
      return orderNo;
    }
  }
}
