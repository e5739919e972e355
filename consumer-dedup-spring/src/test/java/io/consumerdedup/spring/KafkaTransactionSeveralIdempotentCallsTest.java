package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
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
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ContainerCustomizer;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.ConcurrentMessageListenerContainer;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.annotation.Transactional;

/**
 * One record, two {@code @Idempotent} calls in the container's Kafka transaction: the listener
 * bills the order, then ships it, each call deduplicated under a biz type of its own and each
 * producing its output in that transaction. Both outcomes wait for the transaction's end; the
 * second call must not settle the first as if its record had been abandoned.
 */
@SpringBootTest(
    classes = KafkaTransactionSeveralIdempotentCallsTest.App.class,
    properties = {
      "spring.kafka.producer.transaction-id-prefix=dedup-several-",
      "spring.kafka.consumer.properties.isolation.level=read_committed"
    })
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class KafkaTransactionSeveralIdempotentCallsTest {
  static final Duration WAIT = Duration.ofSeconds(60);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "spring_several",
        "several-orders",
        "several-lines",
        "several-ledger",
        "several-nested",
        "several-acks",
        "several-futures",
        "several-copies",
        "several-charges",
        "several-shipments");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry registry;
  @Autowired JdbcTemplate jdbc;

  @Test
  void bothCallsAreRecordedSuccessAndACopyOfTheOrderIsNotBilledAgain(CapturedOutput output)
      throws Exception {
    send("order 1", "ORDER-1");
    long copy = send("order 1 again", "ORDER-1");

    await().atMost(WAIT).until(() -> committed() > copy);
    assertThat(committedOutput("several-charges", "ORDER-1")).as("charges").hasSize(1);
    assertThat(committedOutput("several-shipments", "ORDER-1")).as("shipments").hasSize(1);
    assertThat(status("billing", "ORDER-1")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(status("shipping", "ORDER-1")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(Orders.billed.get("ORDER-1")).as("billing calls").hasValue(1);
    assertThat(output.getAll()).doesNotContain("the container never reported the end");
  }

  @Test
  void aSecondCallThatFailsRollsBothBackAndTheRedeliveryAppliesEachOnce() throws Exception {
    send("order 2", "ORDER-2");
    long copy = send("order 2 again", "ORDER-2");

    await().atMost(WAIT).until(() -> committed() > copy);
    // The fault was real: billing ran, shipping threw, and the redelivery ran both again; the
    // first charge went with the aborted transaction.
    assertThat(Orders.shipped.get("ORDER-2")).as("shipping calls").hasValue(2);
    assertThat(Orders.billed.get("ORDER-2"))
        .as("the rolled-back call, then the redelivery")
        .hasValue(2);
    assertThat(committedOutput("several-charges", "ORDER-2")).as("charges").hasSize(1);
    assertThat(committedOutput("several-shipments", "ORDER-2")).as("shipments").hasSize(1);
    DedupRecord billing = store.find(DedupKey.of("billing", "ORDER-2")).orElseThrow();
    assertThat(billing.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(billing.attempts()).isEqualTo(2);
    assertThat(status("shipping", "ORDER-2")).isEqualTo(DedupStatus.SUCCESS);
  }

  /**
   * The second call throws an {@code Error}: the container rolls the transaction back and stops.
   * Neither key may be left PROCESSING under a lease renewed for as long as the process lives; the
   * restarted container applies each once.
   */
  @Test
  void anErrorInTheSecondCallLeavesBothKeysToTheRedelivery() throws Exception {
    ConcurrentMessageListenerContainer<?, ?> container =
        (ConcurrentMessageListenerContainer<?, ?>) registry.getListenerContainer("several-orders");
    send("order 3", "ORDER-3");

    await()
        .atMost(WAIT)
        .until(() -> container.getContainers().stream().noneMatch(c -> c.isRunning()));
    // Settled as the consumer thread ended, the billing call's among them.
    await()
        .atMost(WAIT)
        .until(
            () ->
                status("billing", "ORDER-3") == DedupStatus.FAILED
                    && status("shipping", "ORDER-3") == DedupStatus.FAILED);
    assertThat(committedOutput("several-charges", "ORDER-3")).isEmpty();

    container.stop();
    container.start();
    long copy = send("order 3 again", "ORDER-3");
    await().atMost(WAIT).until(() -> committed("several-orders") > copy);
    assertThat(committedOutput("several-charges", "ORDER-3")).as("charges").hasSize(1);
    assertThat(committedOutput("several-shipments", "ORDER-3")).as("shipments").hasSize(1);
    assertThat(status("billing", "ORDER-3")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(status("shipping", "ORDER-3")).isEqualTo(DedupStatus.SUCCESS);
  }

  /** The same method called twice for one record, with two keys: each call is its own claim. */
  @Test
  void oneMethodCalledWithTwoKeysRecordsBothAndSkipsACopy() throws Exception {
    sendTo("several-lines", "order 4", "ORDER-4");
    long copy = sendTo("several-lines", "order 4 again", "ORDER-4");

    await().atMost(WAIT).until(() -> committed("several-lines") > copy);
    for (String line : List.of("ORDER-4:1", "ORDER-4:2")) {
      assertThat(committedOutput("several-charges", line)).as("charges of " + line).hasSize(1);
      assertThat(status("line", line)).isEqualTo(DedupStatus.SUCCESS);
    }
  }

  /**
   * The second call is given a copy of the record (its value enriched): a call of the same
   * delivery, whose claim must not settle the first's as abandoned.
   */
  @Test
  void aCallGivenACopyOfTheRecordIsRecordedWithTheFirst() throws Exception {
    sendTo("several-copies", "order 9", "ORDER-9");
    long copy = sendTo("several-copies", "order 9 again", "ORDER-9");

    await().atMost(WAIT).until(() -> committed("several-copies") > copy);
    assertThat(committedOutput("several-charges", "ORDER-9")).as("charges").hasSize(1);
    assertThat(status("billing", "ORDER-9")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(status("shipping-enriched", "ORDER-9")).isEqualTo(DedupStatus.SUCCESS);
  }

  /** The second call returns a future: its outcome, too, waits for the transaction. */
  @Test
  void aSecondCallReturningAFutureIsRecordedWithTheFirst() throws Exception {
    sendTo("several-futures", "order 8", "ORDER-8");
    long copy = sendTo("several-futures", "order 8 again", "ORDER-8");

    await().atMost(WAIT).until(() -> committed("several-futures") > copy);
    assertThat(committedOutput("several-charges", "ORDER-8")).as("charges").hasSize(1);
    assertThat(committedOutput("several-shipments", "ORDER-8")).as("shipments").hasSize(1);
    assertThat(status("billing", "ORDER-8")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(status("shipping-later", "ORDER-8")).isEqualTo(DedupStatus.SUCCESS);
  }

  /**
   * Ack mode {@code MANUAL}: the billing call takes the record's acknowledgment and acknowledges
   * later, from another thread, which consumer-dedup passes on once its claim is recorded SUCCESS.
   * (spring-kafka sends the record's offset with its transaction either way.)
   */
  @Test
  void aCallTakingTheAcknowledgmentIsRecordedWithTheOthers() throws Exception {
    long offset = sendTo("several-acks", "order 7", "ORDER-7");

    await().atMost(WAIT).until(() -> committed("several-acks") > offset);
    assertThat(committedOutput("several-charges", "ORDER-7")).as("charges").hasSize(1);
    assertThat(status("billing", "ORDER-7")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(status("shipping", "ORDER-7")).isEqualTo(DedupStatus.SUCCESS);
  }

  /**
   * An {@code @Idempotent} listener calling another {@code @Idempotent} method: the inner call
   * settles first, the listener's own claim after it, both with the record's transaction.
   */
  @Test
  void anIdempotentListenerCallingAnotherIdempotentMethodRecordsBoth() throws Exception {
    sendTo("several-nested", "order 6", "ORDER-6");
    long copy = sendTo("several-nested", "order 6 again", "ORDER-6");

    await().atMost(WAIT).until(() -> committed("several-nested") > copy);
    assertThat(committedOutput("several-shipments", "ORDER-6")).as("shipments").hasSize(1);
    assertThat(Orders.shipped.get("ORDER-6")).as("shipping calls").hasValue(1);
    assertThat(status("order", "ORDER-6")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(status("shipping", "ORDER-6")).isEqualTo(DedupStatus.SUCCESS);
  }

  /**
   * Mode TRANSACTIONAL, each call in a database transaction of its own inside the container's Kafka
   * transaction: each claim commits with its call's effects, and its outcome still waits for the
   * Kafka transaction.
   */
  @Test
  void twoTransactionalCallsInsideTheKafkaTransactionAreBothRecordedAndACopyIsSkipped()
      throws Exception {
    sendTo("several-ledger", "order 5", "ORDER-5");
    long copy = sendTo("several-ledger", "order 5 again", "ORDER-5");

    await().atMost(WAIT).until(() -> committed("several-ledger") > copy);
    assertThat(SpringTestEnvironment.effects(jdbc, "debit", "ORDER-5")).as("debits").isEqualTo(1);
    assertThat(SpringTestEnvironment.effects(jdbc, "credit", "ORDER-5")).as("credits").isEqualTo(1);
    assertThat(status("debit", "ORDER-5")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(status("credit", "ORDER-5")).isEqualTo(DedupStatus.SUCCESS);
  }

  private DedupStatus status(String bizType, String orderNo) {
    return store.find(DedupKey.of(bizType, orderNo)).orElseThrow().status();
  }

  private long send(String value, String orderNo) throws Exception {
    return sendTo("several-orders", value, orderNo);
  }

  /** Sends in a transaction of its own; returns the record's offset. */
  private long sendTo(String topic, String value, String orderNo) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, value);
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    return template.executeInTransaction(t -> t.send(record)).get().getRecordMetadata().offset();
  }

  private long committed() throws Exception {
    return committed("several-orders");
  }

  private static long committed(String topic) throws Exception {
    return SpringTestEnvironment.committed(topic, topic, 0);
  }

  private static List<String> committedOutput(String topic, String orderNo) {
    return SpringTestEnvironment.readWritten(topic, "read_committed").stream()
        .filter(record -> orderNo.equals(record.key()))
        .map(ConsumerRecord::value)
        .toList();
  }

  static final class Orders {
    static final Map<String, AtomicInteger> billed = new ConcurrentHashMap<>();
    static final Map<String, AtomicInteger> shipped = new ConcurrentHashMap<>();

    static int count(Map<String, AtomicInteger> calls, String orderNo) {
      return calls.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Billing billing(KafkaTemplate<String, String> template) {
      return new Billing(template);
    }

    @Bean
    Shipping shipping(KafkaTemplate<String, String> template) {
      return new Shipping(template);
    }

    @Bean
    Ledger ledger(JdbcTemplate jdbc) {
      return new Ledger(jdbc);
    }

    @Bean
    OrderListener orderListener(Billing billing, Shipping shipping, Ledger ledger) {
      return new OrderListener(billing, shipping, ledger);
    }

    /** Ack mode MANUAL for the listener that acknowledges from another thread. */
    @Bean
    ContainerCustomizer<Object, Object, ConcurrentMessageListenerContainer<Object, Object>>
        acknowledgedByHand() {
      return container -> {
        if ("several-acks".equals(container.getListenerId())) {
          container.getContainerProperties().setAckMode(ContainerProperties.AckMode.MANUAL);
        }
      };
    }

    /** The database's transaction manager, beside the container's Kafka one. */
    @Bean
    DataSourceTransactionManager ledgerTransactions(DataSource dataSource) {
      return new DataSourceTransactionManager(dataSource);
    }
  }

  static class OrderListener {
    final Billing billing;
    final Shipping shipping;
    final Ledger ledger;

    OrderListener(Billing billing, Shipping shipping, Ledger ledger) {
      this.billing = billing;
      this.shipping = shipping;
      this.ledger = ledger;
    }

    @KafkaListener(id = "several-orders", topics = "several-orders")
    public void onOrder(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      billing.bill(orderNo);
      shipping.ship(orderNo);
    }

    /** Bills the order's two lines, one call each. */
    @KafkaListener(id = "several-lines", topics = "several-lines")
    public void onOrderLines(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      billing.billLine(orderNo + ":1");
      billing.billLine(orderNo + ":2");
    }

    @KafkaListener(id = "several-futures", topics = "several-futures")
    public void onOrderShippedLater(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      billing.bill(orderNo);
      shipping.shipLater(orderNo).join();
    }

    @KafkaListener(id = "several-copies", topics = "several-copies")
    public void onOrderEnriched(ConsumerRecord<String, String> record) {
      billing.bill(SpringTestEnvironment.header(record, "order-no"));
      shipping.shipEnriched(
          new ConsumerRecord<>(
              record.topic(),
              record.partition(),
              record.offset(),
              record.timestamp(),
              record.timestampType(),
              record.serializedKeySize(),
              record.serializedValueSize(),
              record.key(),
              "enriched " + record.value(),
              record.headers(),
              record.leaderEpoch()));
    }

    @KafkaListener(id = "several-acks", topics = "several-acks")
    public void onOrderAcknowledgedLater(
        ConsumerRecord<String, String> record, Acknowledgment ack) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      billing.billThenAcknowledge(orderNo, ack);
      shipping.ship(orderNo);
    }

    @Idempotent(bizType = "order", header = "order-no")
    @KafkaListener(id = "several-nested", topics = "several-nested")
    public void onOrderToShip(ConsumerRecord<String, String> record) {
      shipping.ship(SpringTestEnvironment.header(record, "order-no"));
    }

    @KafkaListener(id = "several-ledger", topics = "several-ledger")
    public void onLedgerEntry(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      ledger.debit(orderNo);
      ledger.credit(orderNo);
    }
  }

  static class Billing {
    final KafkaTemplate<String, String> template;

    Billing(KafkaTemplate<String, String> template) {
      this.template = template;
    }

    @Idempotent(bizType = "billing", header = "order-no")
    public void bill(String orderNo) {
      Orders.count(Orders.billed, orderNo);
      template.send("several-charges", orderNo, "charge for " + orderNo);
    }

    /** Bills, and acknowledges the record half a second later, from another thread. */
    @Idempotent(bizType = "billing", header = "order-no")
    public void billThenAcknowledge(String orderNo, Acknowledgment ack) {
      bill(orderNo);
      CompletableFuture.runAsync(
          ack::acknowledge, CompletableFuture.delayedExecutor(500, TimeUnit.MILLISECONDS));
    }

    @Idempotent(bizType = "line", key = "#payload")
    public void billLine(String line) {
      template.send("several-charges", line, "charge for " + line);
    }
  }

  static class Shipping {
    final KafkaTemplate<String, String> template;

    Shipping(KafkaTemplate<String, String> template) {
      this.template = template;
    }

    /** Fails its first call for ORDER-2 with an exception, for ORDER-3 with an Error. */
    @Idempotent(bizType = "shipping", header = "order-no")
    public void ship(String orderNo) {
      int call = Orders.count(Orders.shipped, orderNo);
      if (call == 1 && orderNo.equals("ORDER-2")) {
        throw new IllegalStateException("the carrier refused the parcel");
      }
      if (call == 1 && orderNo.equals("ORDER-3")) {
        throw new AssertionError("the carrier's client broke");
      }
      template.send("several-shipments", orderNo, "shipment for " + orderNo);
    }

    @Idempotent(bizType = "shipping-enriched", header = "order-no")
    public void shipEnriched(ConsumerRecord<String, String> enriched) {
      String orderNo = SpringTestEnvironment.header(enriched, "order-no");
      template.send("several-shipments", orderNo, "shipment for " + orderNo);
    }

    @Idempotent(bizType = "shipping-later", header = "order-no")
    public CompletableFuture<Void> shipLater(String orderNo) {
      template.send("several-shipments", orderNo, "shipment for " + orderNo);
      return CompletableFuture.completedFuture(null);
    }
  }

  static class Ledger {
    final JdbcTemplate jdbc;

    Ledger(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Transactional("ledgerTransactions")
    @Idempotent(bizType = "debit", header = "order-no", mode = DedupMode.TRANSACTIONAL)
    public void debit(String orderNo) {
      SpringTestEnvironment.effect(jdbc, "debit", orderNo, null);
    }

    @Transactional("ledgerTransactions")
    @Idempotent(bizType = "credit", header = "order-no", mode = DedupMode.TRANSACTIONAL)
    public void credit(String orderNo) {
      SpringTestEnvironment.effect(jdbc, "credit", orderNo, null);
    }
  }
}
