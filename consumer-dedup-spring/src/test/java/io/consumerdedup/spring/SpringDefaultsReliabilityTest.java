package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.ChildClaimer;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.testing.ChildJvm;
import io.consumerdedup.testing.TcpProxy;
import io.consumerdedup.testing.TestDatabase;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.nio.charset.StandardCharsets;
import java.sql.DriverManager;
import java.sql.SQLException;
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
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.annotation.Transactional;

/**
 * The faults that used to lose records under the Spring Boot defaults (no error handler bean: the
 * container's {@code DefaultErrorHandler} tries a record ten times without back-off, then logs and
 * skips it), each injected for real: a key held by a consumer that was killed, and a database that
 * refuses connections for 25 seconds. The application configures nothing of consumer-dedup; its
 * DataSource runs through a TCP proxy that can refuse connections.
 */
@SpringBootTest(
    classes = SpringDefaultsReliabilityTest.App.class,
    // The pool gives up on a connection after a second (its default waits 30 s), so that the store
    // fails during the outage and the record is held, rather than waiting inside one claim.
    properties = "spring.datasource.hikari.connection-timeout=1000")
@DirtiesContext
class SpringDefaultsReliabilityTest {
  static final Duration DEAD_HOLDERS_LEASE = Duration.ofSeconds(8);
  static TcpProxy proxy;
  static String schema;
  static HikariDataSource direct;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    proxy = TcpProxy.forPostgres();
    schema =
        SpringTestEnvironment.prepare(
            registry,
            "spring_rel",
            proxy::rewrite,
            2,
            "rel-held",
            "rel-outage",
            "rel-error",
            "rel-tx-outage",
            "rel-ctx-outage");
    direct = TestDatabase.dataSource(schema, 2);
  }

  @AfterAll
  static void tearDown() {
    direct.close();
    proxy.close();
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired MeterRegistry meters;

  @Test
  void aKeyHeldByAKilledConsumerIsAppliedOnceItsLeaseRunsOutAndNothingIsSkipped() throws Exception {
    DedupKey key = DedupKey.of("payment", "HELD-BY-DEAD");
    // Consumer A claims the key and dies inside its handler: its lease stays live for 8 s.
    try (ChildJvm consumerA =
        ChildJvm.start(
            ChildClaimer.class,
            TestDatabase.url(schema),
            key.bizType(),
            key.bizKey(),
            String.valueOf(DEAD_HOLDERS_LEASE.toMillis()))) {
      consumerA.awaitLine("HANDLER-STARTED", Duration.ofSeconds(60));
      consumerA.kill();
    }
    long killedAt = System.nanoTime();
    assertThat(store.find(key).orElseThrow().isLeaseLive()).as("the dead holder's lease").isTrue();

    long heldOffset = send("rel-held", 0, "charge 40", key.bizKey());
    long laterOffset = send("rel-held", 0, "charge 15", "AFTER-DEAD");
    send("rel-held", 1, "charge 7", "OTHER-PARTITION");

    // The other partition keeps moving while the held record waits.
    await().atMost(Duration.ofSeconds(15)).until(() -> effects("OTHER-PARTITION") == 1);
    assertThat(Duration.ofNanos(System.nanoTime() - killedAt))
        .as("applied while the dead holder's lease still lived")
        .isLessThan(DEAD_HOLDERS_LEASE);
    assertThat(effects(key.bizKey())).isZero();
    assertThat(committed("rel-held", 0)).isLessThanOrEqualTo(heldOffset);

    // Once the lease runs out, the key is taken over and applied once; the partition moves on.
    await().atMost(Duration.ofSeconds(60)).until(() -> effects("AFTER-DEAD") == 1);
    assertThat(effects(key.bizKey())).isEqualTo(1);
    // Its SUCCESS is written in the background, grouped with other marks: soon, not at once.
    await()
        .atMost(Duration.ofSeconds(15))
        .until(() -> store.find(key).orElseThrow().status() == DedupStatus.SUCCESS);
    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.attempts()).as("the dead holder's claim, then the takeover").isEqualTo(2);
    await().atMost(Duration.ofSeconds(15)).until(() -> committed("rel-held", 0) == laterOffset + 1);
  }

  /**
   * Three listeners' records arrive during one outage: a mode SEPARATE listener's, a mode
   * TRANSACTIONAL {@code @Transactional} listener's whose transaction cannot open, and one in a
   * container's database transaction that cannot open. Each is held, not skipped, and applied once
   * afterwards.
   */
  @Test
  void recordsArrivingWhileTheDatabaseRefusesConnectionsFor25sAreAppliedOnceAfterwards()
      throws Exception {
    long before = committed("rel-outage", 0);
    long txBefore = committed("rel-tx-outage", 0);
    proxy.refuse();
    long refusedAt = System.nanoTime();
    long last = -1;
    long txOffset;
    try {
      for (int i = 1; i <= 3; i++) {
        last = send("rel-outage", 0, "charge " + i, "OUTAGE-" + i);
      }
      txOffset = send("rel-tx-outage", 0, "charge 5", "TX-OUTAGE-1");
      send("rel-ctx-outage", 0, "charge 6", "CTX-OUTAGE-1");
      // The fault is real: a new connection to the database is refused.
      assertThatThrownBy(() -> DriverManager.getConnection(proxy.rewrite(TestDatabase.url(schema))))
          .isInstanceOf(SQLException.class)
          .hasMessageContaining("refused");
      // Well into the outage: nothing applied, nothing committed past the records. For the two
      // transactions that cannot open, longer than the ten tries of the default error handler and
      // after-rollback processor, each a second's wait for a connection.
      Thread.sleep(20_000);
      assertThat(effectsLike("OUTAGE-%")).isZero();
      assertThat(committed("rel-outage", 0)).isEqualTo(before);
      assertThat(Outages.listenerCalls).isEmpty();
      // What an operator sees besides the WARN lines: the store_failed outcome counting up.
      assertThat(SpringTestEnvironment.outcomes(meters, "outage", "store_failed")).isPositive();
      assertThat(effects("TX-OUTAGE-1")).isZero();
      assertThat(committed("rel-tx-outage", 0))
          .as("the committed offset, during the outage, of the record at %d", txOffset)
          .isLessThanOrEqualTo(Math.max(txBefore, txOffset));
      assertThat(effects("CTX-OUTAGE-1")).isZero();
    } finally {
      long left = Duration.ofSeconds(25).toNanos() - (System.nanoTime() - refusedAt);
      Thread.sleep(Math.max(0, left / 1_000_000));
      proxy.pass();
    }

    await().atMost(Duration.ofSeconds(60)).until(() -> effectsLike("OUTAGE-%") == 3);
    for (int i = 1; i <= 3; i++) {
      assertThat(effects("OUTAGE-" + i)).as("OUTAGE-" + i).isEqualTo(1);
      assertThat(Outages.listenerCalls.get("OUTAGE-" + i)).hasValue(1);
    }
    long end = last + 1;
    await().atMost(Duration.ofSeconds(15)).until(() -> committed("rel-outage", 0) == end);

    await().atMost(Duration.ofSeconds(60)).until(() -> effects("TX-OUTAGE-1") == 1);
    assertThat(Outages.transactionalListenerCalls.get("TX-OUTAGE-1")).hasValue(1);
    await()
        .atMost(Duration.ofSeconds(15))
        .until(() -> committed("rel-tx-outage", 0) == txOffset + 1);

    long after = send("rel-ctx-outage", 0, "charge 7", "CTX-OUTAGE-2");
    await().atMost(Duration.ofSeconds(60)).until(() -> effects("CTX-OUTAGE-2") == 1);
    assertThat(effects("CTX-OUTAGE-1"))
        .as("the record that came during the outage, before the one after it")
        .isEqualTo(1);
    await().atMost(Duration.ofSeconds(15)).until(() -> committed("rel-ctx-outage", 0) == after + 1);
  }

  @Test
  void aListenerThatThrowsAnErrorLeavesItsKeyFailedNotProcessing() throws Exception {
    send("rel-error", 0, "charge 1", "ERROR-1");

    DedupKey key = DedupKey.of("fatal", "ERROR-1");
    await()
        .atMost(Duration.ofSeconds(30))
        .until(() -> store.find(key).map(DedupRecord::status).orElse(null) == DedupStatus.FAILED);
    assertThat(store.find(key).orElseThrow().lastError())
        .get()
        .asString()
        .contains("StackOverflowError");
  }

  private long send(String topic, int partition, String value, String orderNo) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, partition, null, value);
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    return template.send(record).get().getRecordMetadata().offset();
  }

  /** The listener's group (its id) committed offset of a partition, -1 if none. */
  private long committed(String topic, int partition) throws Exception {
    return SpringTestEnvironment.committed(topic, topic, partition);
  }

  private int effects(String orderNo) {
    return effectsLike(orderNo);
  }

  private int effectsLike(String pattern) {
    // Read around the proxy, so that effects can be counted during the outage.
    Integer count =
        new JdbcTemplate(direct)
            .queryForObject(
                "SELECT count(*) FROM effects WHERE biz_key LIKE ?", Integer.class, pattern);
    return count == null ? 0 : count;
  }

  /** Listener invocations during and after the outage, per order-no. */
  static final class Outages {
    static final Map<String, AtomicInteger> listenerCalls = new ConcurrentHashMap<>();

    /** The same, of the listener in mode TRANSACTIONAL. */
    static final Map<String, AtomicInteger> transactionalListenerCalls = new ConcurrentHashMap<>();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    SimpleMeterRegistry meterRegistry() {
      return new SimpleMeterRegistry();
    }

    /** Boot's listener containers, with the database transaction manager on each. */
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> transactedFactory(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        PlatformTransactionManager transactionManager) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setTransactionManager(transactionManager);
      return factory;
    }

    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }
  }

  static class Listeners {
    final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(id = "rel-held", topics = "rel-held")
    public void charge(ConsumerRecord<String, String> record) {
      effect(record);
    }

    @Idempotent(bizType = "outage", header = "order-no")
    @KafkaListener(id = "rel-outage", topics = "rel-outage")
    public void chargeDuringOutage(ConsumerRecord<String, String> record) {
      Outages.listenerCalls
          .computeIfAbsent(
              SpringTestEnvironment.header(record, "order-no"), k -> new AtomicInteger())
          .incrementAndGet();
      effect(record);
    }

    @Transactional
    @Idempotent(bizType = "tx-outage", header = "order-no", mode = DedupMode.TRANSACTIONAL)
    @KafkaListener(id = "rel-tx-outage", topics = "rel-tx-outage")
    public void chargeInItsTransaction(ConsumerRecord<String, String> record) {
      Outages.transactionalListenerCalls
          .computeIfAbsent(
              SpringTestEnvironment.header(record, "order-no"), k -> new AtomicInteger())
          .incrementAndGet();
      effect(record);
    }

    @Idempotent(bizType = "ctx-outage", header = "order-no")
    @KafkaListener(
        id = "rel-ctx-outage",
        topics = "rel-ctx-outage",
        containerFactory = "transactedFactory")
    public void chargeInTheContainersTransaction(ConsumerRecord<String, String> record) {
      effect(record);
    }

    @Idempotent(bizType = "fatal", header = "order-no")
    @KafkaListener(id = "rel-error", topics = "rel-error")
    public void overflow(ConsumerRecord<String, String> record) {
      throw new StackOverflowError("simulated");
    }

    private void effect(ConsumerRecord<String, String> record) {
      SpringTestEnvironment.effect(
          jdbc, record.topic(), SpringTestEnvironment.header(record, "order-no"), record.value());
    }
  }
}
