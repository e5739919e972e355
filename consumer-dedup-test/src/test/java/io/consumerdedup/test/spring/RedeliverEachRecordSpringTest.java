package io.consumerdedup.test.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupMode;
import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.test.RedeliveryReport;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.support.KafkaHeaders;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.annotation.Transactional;

/**
 * {@link RedeliverEachRecord} on a Spring Boot application with two {@code @Idempotent} listeners,
 * a real PostgreSQL and the in-JVM KRaft broker that the plain-loop tests share (one per test JVM):
 * the listener keyed by a business header passes, the one whose key expression changes per delivery
 * is named in the report.
 */
@SpringBootTest(classes = RedeliverEachRecordSpringTest.App.class)
@RedeliverEachRecord
@DirtiesContext
class RedeliverEachRecordSpringTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static String schema;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    schema = TestDatabase.newSchema("redeliver_spring");
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE TABLE shipments (order_no text NOT NULL)");
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
    registry.add("spring.datasource.url", () -> TestDatabase.url(schema));
    TestKafka.createTopics(
        1, "rt-payments", "rt-refunds", "rt-shipments", "rt-invoices", "rt-lazy-invoices");
    registry.add("spring.kafka.bootstrap-servers", TestKafka::bootstrapServers);
    registry.add("spring.kafka.consumer.auto-offset-reset", () -> "earliest");
    registry.add("consumer-dedup.cleanup.enabled", () -> "false");
  }

  @AfterAll
  static void dropSchema() {
    TestDatabase.dropSchema(schema);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired RedeliveryReport redelivery;
  @Autowired Listeners listeners;
  @Autowired JdbcTemplate jdbc;

  @BeforeEach
  void freshReport() {
    redelivery.reset();
  }

  @Test
  void aListenerKeyedByTheOrderNumberChargesEachOrderOnceThoughEveryRecordArrivesTwice()
      throws Exception {
    send("rt-payments", "ORD-1");
    send("rt-payments", "ORD-2");

    await().atMost(WAIT).until(() -> redelivery.redeliveredCopies() == 2);
    redelivery.assertNoBodyRanTwice();
    assertThat(redelivery.bodyRuns()).isEqualTo(2);
    assertThat(redelivery.failedRedeliveries()).isEmpty();
    assertThat(listeners.charged()).containsOnlyKeys("ORD-1", "ORD-2");
    assertThat(listeners.charged().values()).allSatisfy(count -> assertThat(count).hasValue(1));
  }

  @Test
  void aRecordWithoutItsKeyHeaderIsNamedAsNeverRedeliveredWithWhy() throws Exception {
    template.send(new ProducerRecord<>("rt-payments", "NO-ORDER", "amount 10")).get();

    await().atMost(WAIT).until(() -> !redelivery.neverRedelivered().isEmpty());
    assertThat(redelivery.neverRedelivered())
        .singleElement()
        .asString()
        .contains(
            "rt-payments-0@",
            "DedupKeyMissingException",
            "header 'order-no' is absent or empty",
            "dead-lettered and never redelivered");
    assertThat(redelivery.redeliveredCopies()).isZero();
    assertThat(listeners.charged()).doesNotContainKey("NO-ORDER");
  }

  @Test
  void aListenerWhoseKeyExpressionChangesPerDeliveryIsNamedWithBothRuns() throws Exception {
    send("rt-refunds", "REF-1");

    await().atMost(WAIT).until(() -> redelivery.redeliveredCopies() == 1);
    assertThat(redelivery.bodiesRunTwice())
        .singleElement()
        .satisfies(
            runs -> {
              assertThat(runs.listener()).isEqualTo("Listeners.refund");
              assertThat(runs.record()).isEqualTo("rt-refunds-0@0");
              assertThat(runs.runs())
                  .extracting(RedeliveryReport.BodyRun::copy)
                  .containsExactly(1, 2);
            });
    assertThatThrownBy(redelivery::assertNoBodyRanTwice)
        .isInstanceOf(AssertionError.class)
        .hasMessageContaining("1 record was processed twice")
        .hasMessageContaining("Listeners.refund ran its body 2 times for record rt-refunds-0@0")
        .hasMessageContaining("(key 'REF-1')")
        .hasMessageContaining("run 1 on the first delivery")
        .hasMessageContaining("run 2 on the redelivered copy");
    assertThat(listeners.refunded().get("REF-1")).hasValue(2);
  }

  @Test
  void aTransactionalListenerGetsItsCopyAfterTheCommitAndShipsOnce() throws Exception {
    send("rt-shipments", "ORD-7");
    send("rt-shipments", "ORD-8");

    await().atMost(WAIT).until(() -> redelivery.redeliveredCopies() == 2);
    redelivery.assertNoBodyRanTwice();
    assertThat(redelivery.bodyRuns()).isEqualTo(2);
    // A copy delivered inside the first transaction would have found the key in progress.
    assertThat(redelivery.failedRedeliveries()).isEmpty();
    assertThat(jdbc.queryForList("SELECT order_no FROM shipments ORDER BY 1", String.class))
        .containsExactly("ORD-7", "ORD-8");
  }

  @Test
  void aListenerThatFailsOnceAndSucceedsOnTheContainersRetryPasses() throws Exception {
    send("rt-invoices", "INV-1");

    await().atMost(WAIT).until(() -> redelivery.redeliveredCopies() == 1);
    assertThat(listeners.invoiced().get("INV-1")).hasValue(1);
    assertThat(redelivery.bodyRuns()).as("the failed run and its retry").isEqualTo(2);
    assertThat(redelivery.bodiesRunTwice()).isEmpty();
    redelivery.assertNoBodyRanTwice();
  }

  @Test
  void aListenerWhoseFirstRunThrowsAnUnprintableExceptionAndWhoseRetrySucceedsPasses()
      throws Exception {
    send("rt-lazy-invoices", "INV-2");

    await().atMost(WAIT).until(() -> redelivery.redeliveredCopies() == 1);
    assertThat(listeners.lazyInvoiceFailures()).as("first runs that threw").hasValue(1);
    assertThat(listeners.invoiced().get("INV-2")).hasValue(1);
    assertThat(redelivery.bodyRuns()).as("the failed run and its retry").isEqualTo(2);
    assertThat(redelivery.bodiesRunTwice()).isEmpty();
    redelivery.assertNoBodyRanTwice();
  }

  private void send(String topic, String orderNo) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, orderNo, "amount 10");
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    template.send(record).get();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }
  }

  /** Read through the methods: the bean is a proxy, whose own fields are empty. */
  static class Listeners {
    private final Map<String, AtomicInteger> charged = new ConcurrentHashMap<>();
    private final Map<String, AtomicInteger> refunded = new ConcurrentHashMap<>();
    private final Map<String, AtomicInteger> invoiced = new ConcurrentHashMap<>();
    private final Map<String, Boolean> invoiceFailed = new ConcurrentHashMap<>();
    private final AtomicInteger lazyInvoiceFailures = new AtomicInteger();
    private final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    public Map<String, AtomicInteger> charged() {
      return charged;
    }

    public Map<String, AtomicInteger> refunded() {
      return refunded;
    }

    public Map<String, AtomicInteger> invoiced() {
      return invoiced;
    }

    public AtomicInteger lazyInvoiceFailures() {
      return lazyInvoiceFailures;
    }

    /**
     * Fails once with an exception that cannot describe itself (it prints an entity loaded lazily);
     * the container's error handler retries the record.
     */
    @Idempotent(bizType = "lazy-invoice", header = "order-no")
    @KafkaListener(id = "rt-lazy-invoices", topics = "rt-lazy-invoices")
    public void lazyInvoice(ConsumerRecord<String, String> record) {
      if (invoiceFailed.putIfAbsent(record.key(), true) == null) {
        lazyInvoiceFailures.incrementAndGet();
        throw new UnprintableFailure();
      }
      invoiced.computeIfAbsent(record.key(), k -> new AtomicInteger()).incrementAndGet();
    }

    /** A downstream that fails once: the container's error handler retries the record. */
    @Idempotent(bizType = "invoice", header = "order-no")
    @KafkaListener(id = "rt-invoices", topics = "rt-invoices")
    public void invoice(ConsumerRecord<String, String> record) {
      if (invoiceFailed.putIfAbsent(record.key(), true) == null) {
        throw new IllegalStateException("invoice service unavailable");
      }
      invoiced.computeIfAbsent(record.key(), k -> new AtomicInteger()).incrementAndGet();
    }

    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(id = "rt-payments", topics = "rt-payments")
    public void charge(ConsumerRecord<String, String> record) {
      charged.computeIfAbsent(record.key(), k -> new AtomicInteger()).incrementAndGet();
    }

    /** A key that is new on every delivery: the mistake the report is for. */
    @Idempotent(bizType = "refund", key = "T(java.util.UUID).randomUUID().toString()")
    @KafkaListener(id = "rt-refunds", topics = "rt-refunds")
    public void refund(String payload, @Header(KafkaHeaders.RECEIVED_KEY) String key) {
      refunded.computeIfAbsent(key, k -> new AtomicInteger()).incrementAndGet();
    }

    /** The dedup row joins the listener's transaction, which the shipment row commits with. */
    @Idempotent(bizType = "shipment", header = "order-no", mode = DedupMode.TRANSACTIONAL)
    @Transactional
    @KafkaListener(id = "rt-shipments", topics = "rt-shipments")
    public void ship(ConsumerRecord<String, String> record) {
      jdbc.update("INSERT INTO shipments (order_no) VALUES (?)", record.key());
    }
  }

  /** An exception whose message cannot be read, as one that prints an entity loaded lazily. */
  static final class UnprintableFailure extends RuntimeException {
    private static final long serialVersionUID = 1L;

    @Override
    public String getMessage() {
      throw new IllegalStateException("could not initialize proxy - no Session");
    }
  }
}
