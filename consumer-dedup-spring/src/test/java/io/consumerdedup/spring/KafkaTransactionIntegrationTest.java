package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.kafka.MissingKeyPolicy;
import io.consumerdedup.spring.listener.IdempotentRecordInterceptor;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ContainerCustomizer;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.config.TopicBuilder;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.ConcurrentMessageListenerContainer;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.KafkaMessageListenerContainer;
import org.springframework.kafka.listener.MessageListener;
import org.springframework.kafka.listener.RecordInterceptor;
import org.springframework.kafka.transaction.KafkaTransactionManager;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.annotation.Transactional;

/**
 * Consume-process-produce in Kafka transactions ({@code transaction-id-prefix} set, so the
 * container runs each record in a transaction of Spring Boot's {@code KafkaTransactionManager}),
 * with consumer-dedup's defaults. When the transaction does not commit after the listener returned,
 * its output is discarded, and the record's redelivery must produce the output again, not be
 * skipped as a duplicate: the broker refuses a record the transaction sent, or aborts a transaction
 * that outlived {@code transaction.timeout.ms} (1.5 s here).
 */
@SpringBootTest(
    classes = KafkaTransactionIntegrationTest.App.class,
    properties = {
      "spring.kafka.producer.transaction-id-prefix=dedup-tx-",
      "spring.kafka.producer.properties.transaction.timeout.ms=1500",
      "spring.kafka.consumer.properties.isolation.level=read_committed"
    })
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class KafkaTransactionIntegrationTest {
  static final Duration WAIT = Duration.ofSeconds(60);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "spring_ktx",
        "ktx-orders",
        "ktx-timeout",
        "ktx-receipts",
        "ktx-ledger",
        "ktx-booked",
        "ktx-booked-abort",
        "ktx-hand-built");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry registry;
  @Autowired ConsumerFactory<String, String> consumerFactory;
  @Autowired KafkaTransactionManager<?, ?> kafkaTransactionManager;
  @Autowired IdempotentExecutors executors;

  @Test
  void anOutputWhoseTransactionFailsToCommitIsProducedAgainByTheRedelivery() throws Exception {
    send("ktx-orders", "order 1", "ORDER-1");

    await().atMost(WAIT).until(() -> committedReceipts("ORDER-1").size() == 1);
    DedupRecord record = store.find(DedupKey.of("receipt", "ORDER-1")).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).as("the rolled-back attempt, then the redelivery").isEqualTo(2);
    assertThat(Switches.calls.get("ORDER-1")).hasValue(2);
    // The fault was real: the first receipt was written, and aborted with its transaction.
    assertThat(allReceipts("ORDER-1")).hasSize(2);
    assertThat(committedReceipts("ORDER-1")).as("exactly one committed receipt").hasSize(1);
    await().atMost(WAIT).until(() -> committed("ktx-orders") == 1);
  }

  @Test
  void aTransactionTheBrokerAbortsForOutlivingItsTimeoutLeavesTheKeyToTheRedelivery()
      throws Exception {
    ConcurrentMessageListenerContainer<?, ?> container =
        (ConcurrentMessageListenerContainer<?, ?>) registry.getListenerContainer("ktx-timeout");
    send("ktx-timeout", "order 2", "ORDER-2");

    // Kafka reports the timeout as a fenced producer; the consumer stops, as configured.
    await()
        .atMost(WAIT)
        .until(() -> container.getContainers().stream().noneMatch(c -> c.isRunning()));
    // The claim the container never reported on is recorded FAILED as the consumer thread ends.
    DedupKey key = DedupKey.of("slow-receipt", "ORDER-2");
    await().atMost(WAIT).until(() -> store.find(key).orElseThrow().status() == DedupStatus.FAILED);
    assertThat(committedReceipts("ORDER-2")).isEmpty();

    container.stop();
    container.start();
    await().atMost(WAIT).until(() -> committedReceipts("ORDER-2").size() == 1);
    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).isEqualTo(2);
    assertThat(allReceipts("ORDER-2")).as("the aborted receipt and the committed one").hasSize(2);
    assertThat(committedReceipts("ORDER-2")).hasSize(1);
  }

  @Test
  void transactionalModeInAKafkaOnlyTransactionHoldsTheRecordNamingTheListener() throws Exception {
    send("ktx-ledger", "book 1", "LEDGER-1");
    send("ktx-ledger", "book 1 again", "LEDGER-1");

    await().atMost(WAIT).until(() -> failuresOf("ktx-ledger-0@0").size() >= 2);
    assertThat(failuresOf("ktx-ledger-0@0").get(0))
        .contains("KafkaTransactionIntegrationTest$Listeners#bookInKafkaTransaction")
        .contains("no transaction is bound to the dedup table's DataSource")
        .contains("the active transaction is on another resource, such as Kafka's");
    // Nothing was deduplicated by a row that nobody commits: nothing ran, nothing moved on.
    assertThat(Switches.ledgerCalls).isEmpty();
    assertThat(store.find(DedupKey.of("ledger", "LEDGER-1"))).isEmpty();
    assertThat(committed("ktx-ledger")).isLessThanOrEqualTo(0);
  }

  /**
   * Mode TRANSACTIONAL with the database's transaction inside the container's Kafka transaction:
   * the database's effects are exactly once, but the dedup row commits before Kafka's transaction,
   * so a message the listener sent would be lost if Kafka's commit then failed. The user is told so
   * once per listener, with what to do instead.
   */
  @Test
  void transactionalModeInsideAKafkaTransactionSaysOnceThatItsMessagesCanBeLost(
      CapturedOutput output) throws Exception {
    send("ktx-booked", "book 1", "BOOK-1");
    send("ktx-booked", "book 2", "BOOK-2");
    long last = send("ktx-booked", "book 1 again", "BOOK-1");

    await().atMost(WAIT).until(() -> committed("ktx-booked") > last);
    assertThat(Switches.bookings).containsOnlyKeys("BOOK-1", "BOOK-2");
    assertThat(Switches.bookings.values()).allSatisfy(calls -> assertThat(calls).hasValue(1));
    assertThat(store.find(DedupKey.of("booking", "BOOK-2")).orElseThrow().status())
        .isEqualTo(DedupStatus.SUCCESS);
    String warning =
        "KafkaTransactionIntegrationTest$Listeners#bookInBothTransactions uses"
            + " consumer-dedup mode TRANSACTIONAL inside the container's Kafka transaction";
    assertThat(output.getAll()).contains(warning).contains("outbox table");
    assertThat(output.getAll().split(java.util.regex.Pattern.quote(warning), -1))
        .as("said once for the listener, not once per record")
        .hasSize(2);
  }

  /**
   * The same, and Kafka's commit fails after the database's committed: the database's effects stay
   * exactly once, the redelivery a duplicate, as the warning says.
   */
  @Test
  void transactionalModeInsideAKafkaTransactionKeepsTheDatabasesCommitWhenKafkasFails()
      throws Exception {
    long last = send("ktx-booked-abort", "book 3", "BOOK-3");

    await().atMost(WAIT).until(() -> committed("ktx-booked-abort") > last);
    assertThat(Switches.bookingsBeforeAbort.get("BOOK-3"))
        .as("runs of the listener whose database transaction committed before Kafka's failed")
        .hasValue(1);
    assertThat(store.find(DedupKey.of("booking-abort", "BOOK-3")).orElseThrow().status())
        .isEqualTo(DedupStatus.SUCCESS);
  }

  /**
   * The same with a container built by hand and {@link IdempotentRecordInterceptor} instead of
   * {@code @Idempotent}: Spring Boot's Kafka transaction manager is its only one, set as
   * spring-kafka's Kafka-aware one (which {@code getTransactionManager()} does not return), and no
   * error handler, so failures go to the after-rollback processor. The record whose commit fails is
   * applied again, its copy skipped. A refused claim (a record without its key) must be thrown
   * inside the transaction: intercepted before it, as when the interceptor looked at {@code
   * getTransactionManager()} alone, the exception escaped the container's handling and took the
   * rest of the poll with it, HAND-2 never applied.
   */
  @Test
  void aHandBuiltContainerWithTheInterceptorRedoesARecordWhoseTransactionFailedToCommit()
      throws Exception {
    ContainerProperties properties = new ContainerProperties("ktx-hand-built");
    properties.setGroupId("ktx-hand-built");
    properties.setKafkaAwareTransactionManager(kafkaTransactionManager);
    properties.setMessageListener(
        (MessageListener<String, String>)
            record -> {
              String orderNo = SpringTestEnvironment.header(record, "order-no");
              template.send("ktx-receipts", orderNo, "receipt for " + orderNo);
              int call =
                  Switches.handBuiltCalls
                      .computeIfAbsent(orderNo, k -> new AtomicInteger())
                      .incrementAndGet();
              if (orderNo.equals("HAND-1") && call == 1) {
                template.send("ktx-audit", orderNo, "x".repeat(2_000));
              }
            });
    KafkaMessageListenerContainer<String, String> container =
        new KafkaMessageListenerContainer<>(consumerFactory, properties);
    container.setBeanName("ktx-hand-built");
    IdempotentRecordInterceptor.decorate(
        container, executors.defaultExecutor(), "hand-receipt", "order-no", MissingKeyPolicy.FAIL);
    // One poll: a claim refused before the transaction would escape the container's handling
    // and take the rest of the poll with it.
    send("ktx-hand-built", "order 1", "HAND-1");
    send("ktx-hand-built", "order without its number", null);
    send("ktx-hand-built", "order 2", "HAND-2");
    long last = send("ktx-hand-built", "order 1 again", "HAND-1");
    container.start();
    try {
      await("the poll's records after the one without a key, HAND-2 among them")
          .atMost(Duration.ofSeconds(30))
          .until(() -> committed("ktx-hand-built") > last);
    } finally {
      container.stop();
    }

    assertThat(Switches.handBuiltCalls.get("HAND-1"))
        .as("the rolled-back call, then the redelivery; the copy skipped")
        .hasValue(2);
    assertThat(Switches.handBuiltCalls.get("HAND-2")).hasValue(1);
    assertThat(Switches.handBuiltCalls).as("the record without a key given up").hasSize(2);
    assertThat(allReceipts("HAND-1")).as("the aborted receipt and the committed one").hasSize(2);
    assertThat(committedReceipts("HAND-1")).hasSize(1);
    assertThat(committedReceipts("HAND-2")).hasSize(1);
    DedupRecord record = store.find(DedupKey.of("hand-receipt", "HAND-1")).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).isEqualTo(2);
  }

  /** Sends in a transaction of its own, without the header if null; returns the record's offset. */
  private long send(String topic, String value, @Nullable String orderNo) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, value);
    if (orderNo != null) {
      record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    }
    return template.executeInTransaction(t -> t.send(record)).get().getRecordMetadata().offset();
  }

  private long committed(String topic) throws Exception {
    return SpringTestEnvironment.committed(topic, topic, 0);
  }

  private List<String> committedReceipts(String orderNo) {
    return receipts("read_committed", orderNo);
  }

  private List<String> allReceipts(String orderNo) {
    return receipts("read_uncommitted", orderNo);
  }

  private List<String> receipts(String isolation, String orderNo) {
    return SpringTestEnvironment.readWritten("ktx-receipts", isolation).stream()
        .filter(record -> orderNo.equals(record.key()))
        .map(ConsumerRecord::value)
        .toList();
  }

  private static List<String> failuresOf(String record) {
    return Switches.failures.stream().filter(failure -> failure.contains(record)).toList();
  }

  static final class Switches {
    static final Map<String, AtomicInteger> calls = new ConcurrentHashMap<>();
    static final Map<String, AtomicInteger> handBuiltCalls = new ConcurrentHashMap<>();
    static final Map<String, AtomicInteger> ledgerCalls = new ConcurrentHashMap<>();
    static final Map<String, AtomicInteger> bookings = new ConcurrentHashMap<>();
    static final Map<String, AtomicInteger> bookingsBeforeAbort = new ConcurrentHashMap<>();
    static final List<String> failures = new CopyOnWriteArrayList<>();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners(KafkaTemplate<String, String> template) {
      return new Listeners(template);
    }

    /** A topic whose broker refuses records over 200 bytes. */
    @Bean
    NewTopic audit() {
      return TopicBuilder.name("ktx-audit")
          .partitions(1)
          .config("max.message.bytes", "200")
          .build();
    }

    /**
     * Stops the slow listener's container when its producer is fenced, as spring-kafka advises: it
     * cannot tell a transaction timeout from a rebalance, and would otherwise go on past the
     * record.
     */
    @Bean
    ContainerCustomizer<Object, Object, ConcurrentMessageListenerContainer<Object, Object>>
        stopWhenFenced() {
      return container -> {
        if ("ktx-timeout".equals(container.getListenerId())) {
          container.getContainerProperties().setStopContainerWhenFenced(true);
        }
      };
    }

    /** The database's transaction manager, beside the container's Kafka one. */
    @Bean
    DataSourceTransactionManager bookingTransactions(DataSource dataSource) {
      return new DataSourceTransactionManager(dataSource);
    }

    /** Records what the listeners threw, with every cause. */
    @Bean
    RecordInterceptor<Object, Object> failureRecorder() {
      return SpringTestEnvironment.failureRecorder(Switches.failures);
    }
  }

  static class Listeners {
    final KafkaTemplate<String, String> template;

    Listeners(KafkaTemplate<String, String> template) {
      this.template = template;
    }

    /**
     * Produces a receipt; on the first attempt also an audit record larger than its topic accepts,
     * so the broker refuses it and the transaction cannot commit after the listener returned.
     */
    @Idempotent(bizType = "receipt", header = "order-no")
    @KafkaListener(id = "ktx-orders", topics = "ktx-orders")
    public void produceReceipt(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      template.send("ktx-receipts", orderNo, "receipt for " + orderNo);
      if (call(orderNo) == 1) {
        template.send("ktx-audit", orderNo, "x".repeat(2_000));
      }
    }

    /** Produces a receipt; the first attempt outlives the transaction timeout. */
    @Idempotent(bizType = "slow-receipt", header = "order-no")
    @KafkaListener(id = "ktx-timeout", topics = "ktx-timeout")
    public void produceReceiptSlowly(ConsumerRecord<String, String> record)
        throws InterruptedException {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      template.send("ktx-receipts", orderNo, "receipt for " + orderNo);
      if (call(orderNo) == 1) {
        Thread.sleep(4000);
      }
    }

    private static int call(String orderNo) {
      return Switches.calls.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
    }

    @Idempotent(bizType = "ledger", header = "order-no", mode = DedupMode.TRANSACTIONAL)
    @KafkaListener(id = "ktx-ledger", topics = "ktx-ledger")
    public void bookInKafkaTransaction(ConsumerRecord<String, String> record) {
      Switches.ledgerCalls
          .computeIfAbsent(
              SpringTestEnvironment.header(record, "order-no"), k -> new AtomicInteger())
          .incrementAndGet();
    }

    @Transactional("bookingTransactions")
    @Idempotent(bizType = "booking", header = "order-no", mode = DedupMode.TRANSACTIONAL)
    @KafkaListener(id = "ktx-booked", topics = "ktx-booked")
    public void bookInBothTransactions(ConsumerRecord<String, String> record) {
      Switches.bookings
          .computeIfAbsent(
              SpringTestEnvironment.header(record, "order-no"), k -> new AtomicInteger())
          .incrementAndGet();
    }

    /** As above; the first call also sends a record the broker refuses, failing Kafka's commit. */
    @Transactional("bookingTransactions")
    @Idempotent(bizType = "booking-abort", header = "order-no", mode = DedupMode.TRANSACTIONAL)
    @KafkaListener(id = "ktx-booked-abort", topics = "ktx-booked-abort")
    public void bookThenFailKafkasCommit(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      int call =
          Switches.bookingsBeforeAbort
              .computeIfAbsent(orderNo, k -> new AtomicInteger())
              .incrementAndGet();
      if (call == 1) {
        template.send("ktx-audit", orderNo, "x".repeat(2_000));
      }
    }
  }
}
