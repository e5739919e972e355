package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
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
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.CommonErrorHandler;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.RecordInterceptor;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.util.backoff.FixedBackOff;

/**
 * A record whose key another consumer holds under a live lease, with the application's own {@code
 * DefaultErrorHandler} (one that gives up after three tries): the {@code @Idempotent} listener is
 * not invoked, the record is held (its partition paused with consumer-dedup's hold back-off, set
 * short here) for as long as the holder's lease lives, never handed to the application's handler to
 * count and recover, and the partition does not move past it. When the holder succeeds, the retry
 * is a duplicate; when it fails, the retry takes the key over and applies it once.
 *
 * <p>A listener whose record is applied, but whose call to another bean's {@code @Idempotent}
 * method meets that method's key held elsewhere, is held the same way: the call's {@code
 * DedupInProgressException} is not the listener's failure, so its claim is given back uncounted.
 *
 * <p>The other consumer is an {@link IdempotentExecutor} of another owner over the same store,
 * claiming the key directly through the core.
 */
@SpringBootTest(
    classes = InProgressIntegrationTest.App.class,
    properties = {
      "consumer-dedup.owner-id=" + InProgressIntegrationTest.THIS_INSTANCE,
      "consumer-dedup.hold.initial-backoff=" + InProgressIntegrationTest.BACK_OFF_MS + "ms",
      "consumer-dedup.hold.max-backoff=1s",
      // Few, so that a held record counting attempts would be given up within a few tries.
      "consumer-dedup.max-attempts=2",
      // Two scenarios, one listener (and group) each, of one biz type; their keys differ.
      "consumer-dedup.shared-biz-types=payment"
    })
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class InProgressIntegrationTest {
  static final String THIS_INSTANCE = "this-instance";
  static final String OTHER_INSTANCE = "other-instance";
  static final Duration WAIT = Duration.ofSeconds(15);
  static final long BACK_OFF_MS = 200;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry, "spring_ip", "ip-holder-succeeds", "ip-holder-fails", "ip-nested");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired MeterRegistry registry;
  @Autowired CommonErrorHandler errorHandler;
  @Autowired DefaultErrorHandler applicationErrorHandler;

  /** The consumer elsewhere that holds the key. */
  IdempotentExecutor otherInstance;

  @BeforeEach
  void startOtherInstance() {
    otherInstance = IdempotentExecutor.builder(store).ownerId(OTHER_INSTANCE).build();
  }

  @AfterEach
  void stopOtherInstance() {
    otherInstance.close();
  }

  @Test
  void heldRecordIsRetriedWithTheApplicationsBackOffThenSkippedOnceTheHolderSucceeds()
      throws Exception {
    String topic = "ip-holder-succeeds";
    DedupKey key = DedupKey.of("payment", "HELD-1");
    double inProgressBefore = outcomes("payment", "in_progress");
    double duplicatesBefore = outcomes("payment", "duplicate");

    DedupClaim claim = otherInstance.claim(key, null, "elsewhere");
    assertThat(claim.isDuplicate()).isFalse();
    long heldOffset = send(topic, "charge 40", "HELD-1");
    long laterOffset = send(topic, "charge 15", "AFTER-1");

    awaitRetriedWhileHeld(topic, key, heldOffset, inProgressBefore);

    claim.complete();

    // The partition moves on: the later record is applied once...
    await().atMost(WAIT).until(() -> effects("AFTER-1") == 1);
    // ...and the held record was seen as a duplicate of the other instance's success, not applied.
    assertThat(outcomes("payment", "duplicate") - duplicatesBefore).isEqualTo(1);
    assertThat(invocations("HELD-1")).isZero();
    assertThat(effects("HELD-1")).isZero();
    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).isEqualTo(1);
    assertThat(record.owner()).isEqualTo(OTHER_INSTANCE);
    assertThat(invocations("AFTER-1")).isEqualTo(1);
    await().atMost(WAIT).until(() -> committed(topic) == laterOffset + 1);
    // Never given up on (the back-off outlasted the hold): nothing was recovered.
    assertThat(Switches.recovered).isEmpty();
  }

  @Test
  void heldRecordIsRetriedThenAppliedOnceWhenTheHolderFails() throws Exception {
    String topic = "ip-holder-fails";
    DedupKey key = DedupKey.of("payment", "HELD-2");
    double inProgressBefore = outcomes("payment", "in_progress");

    DedupClaim claim = otherInstance.claim(key, null, "elsewhere");
    assertThat(claim.isDuplicate()).isFalse();
    long heldOffset = send(topic, "charge 60", "HELD-2");
    long laterOffset = send(topic, "charge 25", "AFTER-2");

    awaitRetriedWhileHeld(topic, key, heldOffset, inProgressBefore);

    claim.fail(new IllegalStateException("bank call failed on the other instance"));

    await().atMost(WAIT).until(() -> effects("AFTER-2") == 1);
    // The retry took the FAILED key over and applied it exactly once.
    assertThat(invocations("HELD-2")).isEqualTo(1);
    assertThat(effects("HELD-2")).isEqualTo(1);
    // Its SUCCESS is written in the background, grouped with other marks: soon, not at once.
    await().atMost(WAIT).until(() -> store.find(key).orElseThrow().status() == DedupStatus.SUCCESS);
    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.attempts()).isEqualTo(2);
    assertThat(record.owner()).isEqualTo(THIS_INSTANCE);
    assertThat(invocations("AFTER-2")).isEqualTo(1);
    await().atMost(WAIT).until(() -> committed(topic) == laterOffset + 1);
    assertThat(Switches.recovered).isEmpty();
  }

  /**
   * An order listener reserves stock through another bean's {@code @Idempotent} method, whose key
   * another consumer holds (as a crashed one does for its 5-minute lease): the order's record is
   * held, retried well past {@code max-attempts} without counting any, never given up, and logged
   * as a record in progress elsewhere, naming the stock's key, not as a failed attempt. Once the
   * holder completes the stock, the order is applied once.
   */
  @Test
  void aListenerWhoseCalledMethodsKeyIsHeldElsewhereWaitsUncountedThenIsAppliedOnce(
      CapturedOutput output) throws Exception {
    String topic = "ip-nested";
    DedupKey stock = DedupKey.of("stock", "NESTED-1");
    DedupKey order = DedupKey.of("order", "NESTED-1");
    DedupClaim claim = otherInstance.claim(stock, null, "elsewhere");
    assertThat(claim.isDuplicate()).isFalse();
    long offset = send(topic, "order 3", "NESTED-1");

    await()
        .atMost(WAIT)
        .failFast(() -> assertThat(Switches.recovered).as("records given up").isEmpty())
        .untilAsserted(
            () ->
                assertThat(deliveries("NESTED-1"))
                    .as("deliveries of NESTED-1, against max-attempts 2")
                    .hasSizeGreaterThanOrEqualTo(5));
    assertThat(invocations("NESTED-1")).as("the listener ran each time").isGreaterThan(2);
    assertThat(SpringTestEnvironment.effects(jdbc, "order", "NESTED-1")).isZero();
    assertThat(committed(topic)).isLessThanOrEqualTo(offset);
    // Between two tries the order has no row: every claim was given back, none counted.
    await().atMost(WAIT).until(() -> store.find(order).isEmpty());
    assertThat(output.getAll().lines().filter(line -> line.contains("NESTED-1")))
        .as("lines about the order")
        .noneMatch(line -> line.contains("Handler failed"))
        .anyMatch(
            line ->
                line.contains("is in progress elsewhere") && line.contains("key stock/NESTED-1"));

    claim.complete();

    await().atMost(WAIT).until(() -> SpringTestEnvironment.effects(jdbc, "order", "NESTED-1") == 1);
    await().atMost(WAIT).until(() -> committed(topic) == offset + 1);
    assertThat(SpringTestEnvironment.effects(jdbc, "order", "NESTED-1")).isEqualTo(1);
    assertThat(Switches.reserved).as("stock reserved here (the holder did)").isEmpty();
    DedupRecord record = store.find(order).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).isEqualTo(1);
    assertThat(Switches.recovered).isEmpty();
  }

  /**
   * Waits until the record at {@code heldOffset} was tried again more often than the application's
   * error handler would allow, and checks meanwhile that nothing was applied or committed past it,
   * that nothing was recovered, and that the tries followed the hold back-off.
   */
  private void awaitRetriedWhileHeld(
      String topic, DedupKey key, long heldOffset, double inProgressBefore) throws Exception {
    String orderNo = key.bizKey();
    await()
        .atMost(WAIT)
        .failFast("the error handler gave up on a held record", () -> !Switches.recovered.isEmpty())
        .untilAsserted(
            () ->
                assertThat(deliveries(orderNo))
                    .as("deliveries of %s (each retry counts again)", orderNo)
                    .hasSizeGreaterThanOrEqualTo(5));
    assertThat(outcomes("payment", "in_progress") - inProgressBefore).isGreaterThan(1);

    assertThat(invocations(orderNo)).isZero();
    assertThat(effects(orderNo)).isZero();
    // The record behind it waits too: one partition, in order.
    assertThat(Switches.deliveries.keySet()).containsOnly(orderNo);
    assertThat(committed(topic)).isLessThanOrEqualTo(heldOffset);
    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.PROCESSING);
    assertThat(record.owner()).isEqualTo(OTHER_INSTANCE);
    assertThat(record.attempts()).isEqualTo(1);
    assertThat(Switches.recovered).isEmpty();

    // The hold back-off, not the application's 100 ms, spaced the tries.
    List<Long> times = deliveries(orderNo);
    for (int i = 1; i < times.size(); i++) {
      assertThat(Duration.ofNanos(times.get(i) - times.get(i - 1)))
          .isGreaterThanOrEqualTo(Duration.ofMillis(BACK_OFF_MS * 3 / 4));
    }
    assertThat(errorHandler).isSameAs(applicationErrorHandler);
  }

  @BeforeEach
  void clearSwitches() {
    Switches.deliveries.clear();
    Switches.invocations.clear();
    Switches.recovered.clear();
    Switches.reserved.clear();
  }

  private long send(String topic, String value, String orderNo) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, value);
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    return template.send(record).get().getRecordMetadata().offset();
  }

  /** The group's committed offset of partition 0 (its listener id is its group), -1 if none. */
  private long committed(String topic) throws Exception {
    return SpringTestEnvironment.committed(topic, topic, 0);
  }

  private static List<Long> deliveries(String orderNo) {
    return List.copyOf(Switches.deliveries.getOrDefault(orderNo, List.of()));
  }

  private static int invocations(String orderNo) {
    AtomicInteger count = Switches.invocations.get(orderNo);
    return count == null ? 0 : count.get();
  }

  private int effects(String bizKey) {
    return SpringTestEnvironment.effects(jdbc, "payment", bizKey);
  }

  private double outcomes(String bizType, String outcome) {
    return SpringTestEnvironment.outcomes(registry, bizType, outcome);
  }

  /** State the test reads; not a proxied bean, so fields are the real ones. */
  static final class Switches {
    /** Per order-no, when the container handed the record over (each retry counts again). */
    static final Map<String, List<Long>> deliveries = new ConcurrentHashMap<>();

    /** Per order-no, how often the listener method itself ran. */
    static final Map<String, AtomicInteger> invocations = new ConcurrentHashMap<>();

    /** Records the error handler gave up on. */
    static final List<String> recovered = new CopyOnWriteArrayList<>();

    /** The orders whose stock {@link Stock#reserve} reserved. */
    static final List<String> reserved = new CopyOnWriteArrayList<>();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    SimpleMeterRegistry meterRegistry() {
      return new SimpleMeterRegistry();
    }

    /**
     * The application's own error handler, which gives up on a record after three tries in 200 ms:
     * consumer-dedup composes with it and keeps held records away from it.
     */
    @Bean
    DefaultErrorHandler errorHandler() {
      return new DefaultErrorHandler(
          (record, e) ->
              Switches.recovered.add(
                  SpringTestEnvironment.header(record, "order-no") + ": " + e.getMessage()),
          new FixedBackOff(100, 2));
    }

    /**
     * Counts deliveries, retries included; consumer-dedup's record interceptor composes with it.
     */
    @Bean
    RecordInterceptor<Object, Object> deliveryCounter() {
      return (record, consumer) -> {
        Switches.deliveries
            .computeIfAbsent(
                SpringTestEnvironment.header(record, "order-no"), k -> new CopyOnWriteArrayList<>())
            .add(System.nanoTime());
        return record;
      };
    }

    @Bean
    PaymentListeners paymentListeners(JdbcTemplate jdbc) {
      return new PaymentListeners(jdbc);
    }

    @Bean
    Stock stock() {
      return new Stock();
    }

    @Bean
    OrderListener orderListener(JdbcTemplate jdbc, Stock stock) {
      return new OrderListener(jdbc, stock);
    }
  }

  /** Called through its proxy by the order listener, another bean. */
  static class Stock {
    @Idempotent(bizType = "stock", header = "order-no")
    public void reserve(String orderNo) {
      Switches.reserved.add(orderNo);
    }
  }

  static class OrderListener {
    final JdbcTemplate jdbc;
    final Stock stock;

    OrderListener(JdbcTemplate jdbc, Stock stock) {
      this.jdbc = jdbc;
      this.stock = stock;
    }

    @Idempotent(bizType = "order", header = "order-no")
    @KafkaListener(id = "ip-nested", topics = "ip-nested")
    public void onOrder(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      Switches.invocations.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      stock.reserve(orderNo);
      SpringTestEnvironment.effect(jdbc, "order", orderNo, record.value());
    }
  }

  static class PaymentListeners {
    final JdbcTemplate jdbc;

    PaymentListeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(id = "ip-holder-succeeds", topics = "ip-holder-succeeds")
    public void onPayment(ConsumerRecord<String, String> record) {
      charge(record);
    }

    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(id = "ip-holder-fails", topics = "ip-holder-fails")
    public void onPaymentOfFailingHolder(ConsumerRecord<String, String> record) {
      charge(record);
    }

    private void charge(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      Switches.invocations.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      SpringTestEnvironment.effect(jdbc, "payment", orderNo, record.value());
    }
  }
}
