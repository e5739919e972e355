package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestPgBouncer;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.logging.LoggingSystem;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;

/**
 * A Spring Boot application with the defaults and one {@code @Idempotent} listener whose DataSource
 * URL is the PgBouncer URL a user writes (transaction pool mode): records are applied once without
 * a store retry; mode TRANSACTIONAL stops start-up naming {@code prepareThreshold=0}; and four
 * instances starting at once with {@code initialize-schema=always} on a fresh schema all start.
 */
class PgBouncerListenerAppTest {
  private static final Map<String, AtomicInteger> EFFECTS = new ConcurrentHashMap<>();

  private final List<ConfigurableApplicationContext> apps = new ArrayList<>();
  private String schema;
  private String topic;

  @BeforeEach
  void setUp() {
    topic = "pgb-payments-" + UUID.randomUUID().toString().substring(0, 8);
    TestKafka.createTopics(2, topic);
  }

  @AfterEach
  void tearDown() throws Exception {
    // Closed together: one by one, each close made the instances left rebalance their group, and
    // the next close waited for that (40 s for four instances on Kafka 4.1).
    ExecutorService closes = Executors.newFixedThreadPool(Math.max(1, apps.size()));
    try {
      for (Future<?> close : apps.stream().map(app -> closes.submit(app::close)).toList()) {
        close.get();
      }
    } finally {
      closes.shutdown();
    }
    if (schema != null) {
      TestPgBouncer.dropSchema(schema);
    }
  }

  @Test
  void recordsAreAppliedOnceWithoutAStoreRetry() throws Exception {
    schema = TestPgBouncer.newSchema("spring_pgbouncer");
    ConfigurableApplicationContext app = start(TestPgBouncer.url());
    apps.add(app);

    int orders = 60;
    Map<TopicPartition, Long> ends = new HashMap<>();
    try (KafkaProducer<String, String> producer = TestKafka.producer()) {
      // Each order twice (a producer retry's duplicate), spread over both partitions.
      for (int copy = 0; copy < 2; copy++) {
        for (int i = 0; i < orders; i++) {
          ProducerRecord<String, String> record =
              new ProducerRecord<>(topic, i % 2, null, "charge " + i);
          record.headers().add("order-no", orderNo(i).getBytes(StandardCharsets.UTF_8));
          long offset = producer.send(record).get().offset();
          ends.merge(new TopicPartition(topic, i % 2), offset + 1, Math::max);
        }
      }
    }
    // Every copy was consumed (the listener's group is named after the topic).
    await()
        .atMost(Duration.ofSeconds(60))
        .untilAsserted(
            () -> assertThat(TestKafka.committedOffsets(topic)).containsAllEntriesOf(ends));
    assertThat(applied()).isEqualTo(orders);
    JdbcDedupStore store = app.getBean(JdbcDedupStore.class);
    for (int i = 0; i < orders; i++) {
      String orderNo = orderNo(i);
      assertThat(EFFECTS.get(orderNo)).as(orderNo).hasValue(1);
      assertThat(store.find(DedupKey.of("payment", orderNo)))
          .hasValueSatisfying(record -> assertThat(record.attempts()).isEqualTo(1));
    }
    // A statement error (26000, 42P05, 08P01) would have been retried as transient.
    assertThat(store.retry().getMetrics().getNumberOfSuccessfulCallsWithRetryAttempt())
        .as("store calls retried")
        .isZero();
    assertThat(store.retry().getMetrics().getNumberOfFailedCallsWithRetryAttempt())
        .as("store calls that failed after retries")
        .isZero();
  }

  @Test
  void transactionalModeStopsStartUpUnlessTheUrlHasPrepareThresholdZero() {
    schema = TestPgBouncer.newSchema("spring_pgbouncer");

    assertThatThrownBy(() -> start(TestPgBouncer.url(), "consumer-dedup.mode=transactional"))
        .rootCause()
        .isInstanceOf(DedupConfigurationException.class)
        .hasMessageContaining("connection pooler")
        .hasMessageContaining("prepareThreshold=0");

    apps.add(start(TestPgBouncer.url("prepareThreshold=0"), "consumer-dedup.mode=transactional"));
  }

  @Test
  void fourInstancesStartingAtOnceWithInitializeSchemaAllStart() throws Exception {
    schema = "spring_pgb_init_" + UUID.randomUUID().toString().substring(0, 8);
    try (Connection connection = DriverManager.getConnection(TestPgBouncer.url());
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE SCHEMA " + schema);
    }
    int instances = 4;
    CyclicBarrier together = new CyclicBarrier(instances);
    ExecutorService threads = Executors.newFixedThreadPool(instances);
    List<Throwable> failures = new ArrayList<>();
    // Four applications of one JVM would each reset Logback, which is the JVM's, at once (its
    // reset is not thread-safe: a start-up failed on a ConcurrentModificationException in it).
    // Separate instances have a Logback each; here they keep the one the test JVM set up.
    String loggingSystem = System.getProperty(LoggingSystem.SYSTEM_PROPERTY);
    System.setProperty(LoggingSystem.SYSTEM_PROPERTY, LoggingSystem.NONE);
    try {
      List<Future<ConfigurableApplicationContext>> startUps = new ArrayList<>();
      for (int i = 0; i < instances; i++) {
        startUps.add(
            threads.submit(
                () -> {
                  together.await();
                  return start(TestPgBouncer.url(), "consumer-dedup.initialize-schema=always");
                }));
      }
      for (Future<ConfigurableApplicationContext> startUp : startUps) {
        try {
          apps.add(startUp.get());
        } catch (ExecutionException e) {
          failures.add(e.getCause());
        }
      }
    } finally {
      threads.shutdownNow();
      if (loggingSystem == null) {
        System.clearProperty(LoggingSystem.SYSTEM_PROPERTY);
      } else {
        System.setProperty(LoggingSystem.SYSTEM_PROPERTY, loggingSystem);
      }
    }
    assertThat(failures).as("start-ups that failed").isEmpty();
    assertThat(apps).hasSize(instances);
    assertThat(tableExists()).as("the dedup table was created").isTrue();
  }

  private ConfigurableApplicationContext start(String url, String... properties) {
    List<String> all =
        new ArrayList<>(
            List.of(
                "spring.datasource.url=" + url,
                "spring.kafka.bootstrap-servers=" + TestKafka.bootstrapServers(),
                "spring.kafka.consumer.auto-offset-reset=earliest",
                "spring.kafka.listener.concurrency=2",
                "consumer-dedup.table-name=" + schema + ".consumer_dedup",
                "consumer-dedup.cleanup.enabled=false",
                "pgbouncer-test.topic=" + topic,
                "spring.main.banner-mode=off",
                "spring.main.web-application-type=none"));
    all.addAll(List.of(properties));
    return new SpringApplicationBuilder(App.class).properties(all.toArray(String[]::new)).run();
  }

  private boolean tableExists() throws SQLException {
    try (Connection connection =
            DriverManager.getConnection(TestPgBouncer.url(TestPgBouncer.UNNAMED));
        Statement statement = connection.createStatement();
        ResultSet row =
            statement.executeQuery(
                "SELECT to_regclass('" + schema + ".consumer_dedup') IS NOT NULL")) {
      return row.next() && row.getBoolean(1);
    }
  }

  private String orderNo(int i) {
    return topic + "-ORD-" + i;
  }

  private int applied() {
    return (int) EFFECTS.keySet().stream().filter(key -> key.startsWith(topic + "-")).count();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Payments payments() {
      return new Payments();
    }
  }

  static class Payments {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(topics = "${pgbouncer-test.topic}", groupId = "${pgbouncer-test.topic}")
    public void charge(ConsumerRecord<String, String> record) {
      EFFECTS
          .computeIfAbsent(
              SpringTestEnvironment.header(record, "order-no"), k -> new AtomicInteger())
          .incrementAndGet();
    }
  }
}
