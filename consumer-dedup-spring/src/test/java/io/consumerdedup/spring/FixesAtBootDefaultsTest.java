package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.effect;
import static io.consumerdedup.spring.SpringTestEnvironment.effects;
import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.core.DedupAdmin;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupAdmin;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.ConcurrentKafkaListenerContainerFactoryConfigurer;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.ContainerProperties.AckMode;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * Fixes whose own tests run with a setting other than Spring Boot's, run again at its defaults: the
 * containers of the auto-configured factory, claims per poll on, no error handler bean
 * (spring-kafka's {@code DefaultErrorHandler}, ten tries without back-off). Only what a listener
 * shape needs is set: a manual ack mode, for a listener taking an {@code Acknowledgment},
 * configured as {@code spring.kafka.listener.ack-mode=manual} configures it, and a JSON
 * deserializer for a listener taking its payload as a class, as its own consumer property. And
 * fixes whose test needs nothing but those defaults, which share this application rather than start
 * one each (each application started costs seconds, twice in CI: once per Spring Boot line). A real
 * PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = FixesAtBootDefaultsTest.App.class)
@DirtiesContext
class FixesAtBootDefaultsTest {
  static final Duration WAIT = Duration.ofSeconds(20);
  static final String NACK = "bd-nack";
  static final String BATCH = "bd-batch-commit";
  static final String RECORD = "bd-record-commit";
  static final String NEWER = "bd-newer-status";
  static final String LINES = "bd-null-key-part";
  static final String LINE_KEY = "#payload.orderId + ':' + #payload.lineId";
  static final List<String> lineCalls = new CopyOnWriteArrayList<>();
  static final List<String> refusals = new CopyOnWriteArrayList<>();
  static final AtomicInteger nackCalls = new AtomicInteger();
  static final AtomicInteger batchCalls = new AtomicInteger();
  static final AtomicInteger recordCalls = new AtomicInteger();

  /** The group's committed offset of the batch's partition as its retry began; -1 for none. */
  static final AtomicLong committedAtTheRetry = new AtomicLong(Long.MIN_VALUE);

  /** The same for the record listener's record. */
  static final AtomicLong committedAtTheRecordRetry = new AtomicLong(Long.MIN_VALUE);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    TestKafka.createTopics(2, NEWER);
    SpringTestEnvironment.prepare(registry, "bootdefaults", NACK, BATCH, RECORD, LINES);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  /** As {@code AcknowledgmentOrderTest}'s, whose claims are made one record at a time. */
  @Test
  void aNackTheContainerRefusesLeavesTheAppliedKeySucceededWithClaimsPerPoll() throws Exception {
    await()
        .atMost(WAIT)
        .until(() -> !containers.getListenerContainer(NACK).getAssignedPartitions().isEmpty());
    send(template, NACK, "book", "order-no", "N-1");
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(NACK, NACK, 0) == 1);
    assertThat(refusals)
        .as("the nack refused")
        .singleElement()
        .asString()
        .contains("consumer thread");
    assertThat(status(NACK, "N-1")).as("the applied key").isEqualTo(DedupStatus.SUCCESS);

    send(template, NACK, "book again", "order-no", "N-1");
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(NACK, NACK, 0) == 2);
    assertThat(nackCalls).as("listener calls").hasValue(1);
    assertThat(effects(jdbc, NACK, "N-1")).as("N-1 applied").isEqualTo(1);
  }

  /**
   * As {@code BatchListenerConsumerCommitTest}'s, whose error handler backs off for 10 s: here the
   * default one retries the batch at once, in memory. The commit the failed call made must not have
   * passed its FAILED records by then: a process dying before the retry would never see them again.
   */
  @Test
  void aCommitInsideAFailingBatchDoesNotPassItsRecordsBeforeTheRetry() throws Exception {
    send(template, BATCH, "a", "order-no", "c-1");
    send(template, BATCH, "b", "order-no", "c-2");
    containers.getListenerContainer(BATCH).start(); // one poll brings both

    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(BATCH, BATCH, 0) == 2);
    assertThat(batchCalls).as("the failed call, then its retry").hasValue(2);
    assertThat(committedAtTheRetry.get())
        .as("offset committed past the FAILED records before their retry")
        .isLessThan(1);
    assertThat(effects(jdbc, BATCH, "c-1")).as("c-1 applied once").isEqualTo(1);
    assertThat(effects(jdbc, BATCH, "c-2")).as("c-2 applied once").isEqualTo(1);
    assertThat(status(BATCH, "c-2")).isEqualTo(DedupStatus.SUCCESS);
  }

  /**
   * A record listener commits through the consumer it is given ({@code consumer.commitSync()}),
   * then throws: its record is FAILED, and the default error handler retries it at once. The commit
   * must not have passed the record by then: a process dying before the retry would never see it
   * again.
   */
  @Test
  void aCommitInsideAFailingRecordListenerDoesNotPassItsRecordBeforeTheRetry() throws Exception {
    send(template, RECORD, "a", "order-no", "r-1");

    await().atMost(WAIT).until(() -> effects(jdbc, RECORD, "r-1") == 1);
    assertThat(recordCalls).as("the failed call, then its retry").hasValue(2);
    assertThat(committedAtTheRecordRetry.get())
        .as("offset committed past the FAILED record before its retry")
        .isLessThan(1);
    assertThat(effects(jdbc, RECORD, "r-1")).as("r-1 applied once").isEqualTo(1);
  }

  /**
   * As {@code StatusOfANewerVersionTests}' claims, through a record listener: a key whose record a
   * newer version wrote with a status of its own (a rolling upgrade) is held, neither handled nor
   * given up by the default error handler, while a key of another partition is applied; once an
   * operator forgets it (forced), its record is applied once.
   */
  @Test
  void aKeyOfAStatusANewerVersionWroteIsHeldUntilForgottenThenAppliedOnce() throws Exception {
    jdbc.execute("ALTER TABLE consumer_dedup DROP CONSTRAINT IF EXISTS consumer_dedup_status_ck");
    jdbc.update(
        "INSERT INTO consumer_dedup (biz_type, biz_key, status, attempts, owner, created_at,"
            + " updated_at, expires_at) VALUES (?, 'U-held', 'ABANDONED', 1, 'newer-pod', now(),"
            + " now(), now() + interval '1 day')",
        NEWER);
    ListAppender<ILoggingEvent> holds = new ListAppender<>();
    holds.start();
    Logger executorLog = (Logger) LoggerFactory.getLogger(IdempotentExecutor.class);
    executorLog.addAppender(holds);
    try {
      sendTo(NEWER, 0, "U-held");
      sendTo(NEWER, 1, "U-other");

      await().atMost(WAIT).until(() -> effects(jdbc, NEWER, "U-other") == 1);
      // Held again after its back-off: taken for a failure, the default error handler would have
      // tried it ten times at once and given it up (committed past, never applied).
      await().atMost(WAIT).until(() -> heldWarnings(holds, "U-held") >= 3);
      assertThat(SpringTestEnvironment.committed(NEWER, NEWER, 0))
          .as("offset committed past the held record")
          .isLessThan(1);
      assertThat(effects(jdbc, NEWER, "U-held")).as("U-held applied while held").isZero();

      DedupAdmin.Change forgot =
          JdbcDedupAdmin.of((JdbcDedupStore) store)
              .forget(DedupKey.of(NEWER, "U-held"), "ops", true);
      assertThat(forgot.applied()).as(forgot.message()).isTrue();

      await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(NEWER, NEWER, 0) == 1);
      assertThat(effects(jdbc, NEWER, "U-held")).as("U-held applied").isEqualTo(1);
      assertThat(effects(jdbc, NEWER, "U-other")).as("U-other applied").isEqualTo(1);
      assertThat(status(NEWER, "U-held")).isEqualTo(DedupStatus.SUCCESS);
    } finally {
      executorLog.detachAppender(holds);
    }
  }

  /**
   * As {@code KeyExpressionNullPartIntegrationTest}'s, whose error handler dead-letters: here no
   * error handler bean and no dead-letter topic, so a record given up is gone from the partition
   * once logged. Records whose key reads a null property ({@code lineId}) among records with it:
   * each with a key applied once (its copy skipped), each without given up at once, unapplied, the
   * log naming the expression, the part that read null and the record's topic, partition and
   * offset; and the partition moves on past all of them.
   */
  @Test
  void recordsWhoseKeyReadsANullPropertyAreGivenUpWithALogLineNamingTheExpressionAndThePart()
      throws Exception {
    ListAppender<ILoggingEvent> log = new ListAppender<>();
    log.start();
    Logger root = (Logger) LoggerFactory.getLogger(Logger.ROOT_LOGGER_NAME);
    root.addAppender(log);
    try {
      sendLine("O-1", "L-1");
      long lineless1 = sendLine("O-1", null);
      sendLine("O-2", "L-1");
      long lineless2 = sendLine("O-2", null);
      sendLine("O-1", "L-2");
      long last = sendLine("O-1", "L-1"); // a copy of the first: a duplicate

      await()
          .atMost(WAIT)
          .until(() -> SpringTestEnvironment.committed(LINES, LINES, 0) == last + 1);
      assertThat(lineCalls).as("listener calls").containsExactly("O-1:L-1", "O-2:L-1", "O-1:L-2");
      for (String key : List.of("O-1:L-1", "O-2:L-1", "O-1:L-2")) {
        assertThat(effects(jdbc, LINES, key)).as("%s applied", key).isEqualTo(1);
      }
      assertThat(
              jdbc.queryForList(
                  "SELECT biz_key FROM consumer_dedup WHERE biz_type = ? ORDER BY biz_key",
                  String.class,
                  LINES))
          .as("dedup rows")
          .containsExactly("O-1:L-1", "O-1:L-2", "O-2:L-1");
      for (long offset : List.of(lineless1, lineless2)) {
        String record = LINES + "-0@" + offset;
        assertThat(givenUp(log, record))
            .as("ERROR lines of %s, given up", record)
            .singleElement()
            .asString()
            .contains("Gave up on " + record + " ")
            .contains("key expression '" + LINE_KEY + "'")
            .contains("property 'lineId'");
      }
    } finally {
      root.detachAppender(log);
    }
  }

  /** consumer-dedup's ERROR lines naming {@code record} ({@code topic-partition@offset}). */
  private static List<String> givenUp(ListAppender<ILoggingEvent> log, String record) {
    return log.list.stream()
        .filter(event -> event.getLevel() == Level.ERROR)
        .filter(event -> event.getLoggerName().startsWith("io.consumerdedup"))
        .map(ILoggingEvent::getFormattedMessage)
        .filter(message -> message.contains(record + " ") || message.endsWith(record))
        .toList();
  }

  private long sendLine(String orderId, @Nullable String lineId) throws Exception {
    String json =
        "{\"orderId\":\""
            + orderId
            + "\",\"lineId\":"
            + (lineId == null ? "null" : "\"" + lineId + "\"")
            + "}";
    return template.send(LINES, json).get().getRecordMetadata().offset();
  }

  private static long heldWarnings(ListAppender<ILoggingEvent> holds, String bizKey) {
    return holds.list.stream()
        .filter(event -> event.getLevel() == Level.WARN)
        .map(ILoggingEvent::getFormattedMessage)
        .filter(message -> message.contains(bizKey) && message.contains("'ABANDONED'"))
        .count();
  }

  private void sendTo(String topic, int partition, String orderNo) throws Exception {
    ProducerRecord<String, String> record =
        new ProducerRecord<>(topic, partition, null, "apply " + orderNo);
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    template.send(record).get();
  }

  private DedupStatus status(String bizType, String orderNo) {
    return store.find(DedupKey.of(bizType, orderNo)).map(DedupRecord::status).orElse(null);
  }

  /** The JSON payload of {@link #LINES}, read by the listener's own deserializer. */
  record OrderLine(String orderId, @Nullable String lineId) {}

  static class Listeners {
    final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    /** Work done off the consumer thread, which tries a nack and settles for an acknowledgment. */
    @Idempotent(bizType = NACK, header = "order-no")
    @KafkaListener(id = NACK, topics = NACK, containerFactory = "manual")
    public CompletableFuture<Void> onNack(
        String payload, @Header("order-no") String orderNo, Acknowledgment ack) {
      return CompletableFuture.runAsync(
          () -> {
            effect(jdbc, NACK, orderNo, payload);
            if (nackCalls.incrementAndGet() == 1) {
              try {
                ack.nack(Duration.ofMillis(100));
              } catch (IllegalStateException refused) {
                refusals.add(String.valueOf(refused.getMessage()));
              }
            }
            ack.acknowledge();
          });
    }

    /** Commits through its consumer, then fails once; its retry notes what was committed. */
    @Idempotent(bizType = BATCH, header = "order-no")
    @KafkaListener(id = BATCH, topics = BATCH, batch = "true", autoStartup = "false")
    public void charge(List<ConsumerRecord<String, String>> records, Consumer<?, ?> consumer) {
      if (batchCalls.incrementAndGet() == 2) {
        TopicPartition partition = new TopicPartition(BATCH, 0);
        Map<TopicPartition, OffsetAndMetadata> committed =
            consumer.committed(Set.of(partition), Duration.ofSeconds(5));
        OffsetAndMetadata offset = committed.get(partition);
        committedAtTheRetry.set(offset == null ? -1 : offset.offset());
      }
      consumer.commitSync();
      if (batchCalls.get() == 1) {
        throw new IllegalStateException("the listener fails after committing");
      }
      for (ConsumerRecord<String, String> record : records) {
        effect(jdbc, BATCH, header(record, "order-no"), record.value());
      }
    }

    @Idempotent(bizType = NEWER, header = "order-no")
    @KafkaListener(id = NEWER, topics = NEWER)
    public void apply(ConsumerRecord<String, String> record) {
      effect(jdbc, NEWER, header(record, "order-no"), record.value());
    }

    /** A line of an order, keyed by both; a line without its id has no key. */
    @Idempotent(bizType = LINES, key = LINE_KEY)
    @KafkaListener(
        id = LINES,
        topics = LINES,
        properties = {
          "value.deserializer=org.springframework.kafka.support.serializer.JacksonJsonDeserializer",
          "spring.json.value.default.type=io.consumerdedup.spring.FixesAtBootDefaultsTest$OrderLine"
        })
    public void ship(OrderLine line) {
      String key = line.orderId() + ":" + line.lineId();
      lineCalls.add(key);
      effect(jdbc, LINES, key, line.toString());
    }

    /** Commits through its consumer, then fails once; its retry notes what was committed. */
    @Idempotent(bizType = RECORD, header = "order-no")
    @KafkaListener(id = RECORD, topics = RECORD)
    public void chargeOne(ConsumerRecord<String, String> record, Consumer<?, ?> consumer) {
      if (recordCalls.incrementAndGet() == 2) {
        TopicPartition partition = new TopicPartition(RECORD, 0);
        Map<TopicPartition, OffsetAndMetadata> committed =
            consumer.committed(Set.of(partition), Duration.ofSeconds(5));
        OffsetAndMetadata offset = committed.get(partition);
        committedAtTheRecordRetry.set(offset == null ? -1 : offset.offset());
      }
      consumer.commitSync();
      if (recordCalls.get() == 1) {
        throw new IllegalStateException("the listener fails after committing");
      }
      effect(jdbc, RECORD, header(record, "order-no"), record.value());
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }

    /** The auto-configured factory's settings, and ack mode MANUAL. */
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> manual(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setAckMode(AckMode.MANUAL);
      return factory;
    }
  }
}
