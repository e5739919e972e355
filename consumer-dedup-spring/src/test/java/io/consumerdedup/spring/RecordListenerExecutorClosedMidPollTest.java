package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.listener.RecordInterceptor;
import org.springframework.messaging.handler.annotation.Header;

/**
 * An application closed while its container is still in the middle of a poll (the container's stop
 * outlasted the shutdown phase's timeout, here 1 s; a slow listener and a large poll do that), so
 * the context closes the executor and the DataSource while the consumer thread goes on with the
 * poll's records: those records are not run, and the restarted application applies each once.
 * Before, the listener ran them on the claims made with the poll's first record, whose SUCCESS
 * could no longer be written, so the restarted application ran each again once its lease ran out.
 * Two applications one after the other on a real PostgreSQL and the in-JVM broker; the consumer
 * thread is held between two records of the poll until the first application has closed.
 */
class RecordListenerExecutorClosedMidPollTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String TOPIC = "ecm-orders";
  static final int RECORDS = 6;
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();

  /** The second record of the first application's poll waits here until it has closed. */
  static final CountDownLatch reached = new CountDownLatch(1);

  static final CountDownLatch proceed = new CountDownLatch(1);
  static final AtomicBoolean heldOnce = new AtomicBoolean();
  static final AtomicReference<Thread> consumerThread = new AtomicReference<>();

  private String schema;

  @BeforeEach
  void setUp() {
    TestKafka.createTopics(1, TOPIC);
    schema = TestDatabase.newSchema("executor_closed");
  }

  @AfterEach
  void tearDown() {
    proceed.countDown();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void recordsReachedAfterTheExecutorClosedAreNotRunAndTheRestartAppliesEachOnce()
      throws Exception {
    try (KafkaProducer<String, String> producer = TestKafka.producer()) {
      for (int i = 0; i < RECORDS; i++) {
        ProducerRecord<String, String> record = new ProducerRecord<>(TOPIC, "payload of E-" + i);
        record.headers().add("order-no", ("E-" + i).getBytes(StandardCharsets.UTF_8));
        producer.send(record).get();
      }
    }
    ConfigurableApplicationContext first = start();
    try {
      assertThat(reached.await(WAIT.toSeconds(), TimeUnit.SECONDS))
          .as("the second record reached")
          .isTrue();
      // The first record's SUCCESS is written in the background, with the marks of the records
      // around it: on a slow machine it may not be written yet when the second record arrives.
      await()
          .atMost(WAIT)
          .untilAsserted(
              () ->
                  assertThat(count("PROCESSING"))
                      .as("the keys after the first record, claimed with it")
                      .isEqualTo(RECORDS - 1));
    } finally {
      first.close(); // the container's stop times out; the executor and the pool close
    }
    proceed.countDown();
    Thread thread = consumerThread.get();
    thread.join(WAIT.toMillis());
    assertThat(thread.isAlive()).as("the first application's consumer thread ended").isFalse();

    try (ConfigurableApplicationContext restarted = start()) {
      await().atMost(WAIT).until(() -> count("SUCCESS") == RECORDS);
    }
    Map<String, Integer> applied = new TreeMap<>();
    Map<String, Integer> once = new TreeMap<>();
    effects.forEach((key, count) -> applied.put(key, count.get()));
    for (int i = 0; i < RECORDS; i++) {
      once.put("E-" + i, 1);
    }
    assertThat(applied).as("times each key was applied").isEqualTo(once);
  }

  private ConfigurableApplicationContext start() {
    return new SpringApplicationBuilder(App.class)
        .properties(
            "spring.datasource.url=" + TestDatabase.url(schema),
            "spring.datasource.hikari.maximum-pool-size=4",
            "spring.kafka.bootstrap-servers=" + TestKafka.bootstrapServers(),
            "spring.kafka.consumer.auto-offset-reset=earliest",
            "spring.lifecycle.timeout-per-shutdown-phase=1s",
            "consumer-dedup.lease=4s",
            "consumer-dedup.store.retry-max-attempts=1",
            "consumer-dedup.hold.initial-backoff=200ms",
            "consumer-dedup.hold.max-backoff=1s",
            "consumer-dedup.cleanup.enabled=false",
            "spring.main.banner-mode=off",
            "spring.main.web-application-type=none")
        .run();
  }

  private int count(String status) throws SQLException {
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement();
        ResultSet row =
            statement.executeQuery(
                "SELECT count(*) FROM consumer_dedup WHERE biz_type = 'ecm' AND status = '"
                    + status
                    + "'")) {
      row.next();
      return row.getInt(1);
    }
  }

  static class Listener {
    @Idempotent(bizType = "ecm", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    void onOrder(String payload, @Header("order-no") String orderNo) {
      effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listener listener() {
      return new Listener();
    }

    /** Holds the consumer thread before the second record, once, until the test lets it go. */
    @Bean
    RecordInterceptor<Object, Object> holdBeforeSecondRecord() {
      return new RecordInterceptor<>() {
        @Override
        public ConsumerRecord<Object, Object> intercept(
            ConsumerRecord<Object, Object> record, Consumer<Object, Object> consumer) {
          if (record.offset() == 1 && heldOnce.compareAndSet(false, true)) {
            consumerThread.set(Thread.currentThread());
            reached.countDown();
            try {
              proceed.await(WAIT.toSeconds(), TimeUnit.SECONDS);
            } catch (InterruptedException e) {
              Thread.currentThread().interrupt();
            }
          }
          return record;
        }
      };
    }
  }
}
