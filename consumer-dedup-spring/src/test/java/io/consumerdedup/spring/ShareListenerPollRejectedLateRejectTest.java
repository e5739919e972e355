package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.kafka.DeadLetterHandler;
import io.consumerdedup.kafka.DedupShareLoop;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An {@code @Idempotent} share listener whose consumer cannot deserialize a record (no {@code
 * ErrorHandlingDeserializer}) fetched together with a record before it whose listener outlasts two
 * of the 3 s acquisition locks, and a healthy one after it. kafka-clients returns the first record
 * and keeps the other two in its buffer, unrenewable, until the first is acknowledged: their locks
 * run out there. The rejected record is then dead-lettered, its REJECT refused by the broker, and
 * the broker delivers it again. The user expects it in the dead-letter topic once, not once per
 * delivery. Spring Boot 4.0 refuses share listeners, so the boot40 module leaves this class out.
 */
@SpringBootTest(classes = ShareListenerPollRejectedLateRejectTest.App.class)
@DirtiesContext
class ShareListenerPollRejectedLateRejectTest {
  static final Duration WAIT = Duration.ofSeconds(40);
  static final Duration LOCK = Duration.ofSeconds(3);
  static final String TOPIC = "share-poll-rejected-late-reject";

  /** The same, with two consumers in the group. */
  static final String TWO_CONSUMERS = "share-poll-rejected-late-reject-two";

  /** Over two of the locks. */
  static final Duration FIRST_LISTENER_TAKES = Duration.ofSeconds(7);

  /** The order-no header of each call of the listener, with its delivery count. */
  static final List<String> calls = new CopyOnWriteArrayList<>();

  /** The dead letters of undeserializable records, by their order-no header. */
  static final List<String> deadLetters = new CopyOnWriteArrayList<>();

  /** How many times the consumer's deserializer met the poisoned value: its deliveries. */
  static final AtomicInteger poisonReads = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry, "spring_share_poll_rejected_late_reject", TOPIC, TWO_CONSUMERS);
    TestShareGroups.configure(TOPIC, LOCK);
    TestShareGroups.configure(TWO_CONSUMERS, LOCK);
  }

  @Autowired JdbcTemplate jdbc;

  // The worker's messages go to the share loop's logger; the consumer wrapper's to its own.
  private final ListAppender<ILoggingEvent> log = new ListAppender<>();
  private final List<Logger> loggers =
      List.of(
          (Logger) LoggerFactory.getLogger(DedupShareLoop.class),
          (Logger)
              LoggerFactory.getLogger(
                  "io.consumerdedup.spring.autoconfigure.WrappedShareConsumers"));

  @BeforeEach
  void captureTheLog() {
    log.start();
    loggers.forEach(logger -> logger.addAppender(log));
  }

  @AfterEach
  void releaseTheLog() {
    loggers.forEach(logger -> logger.detachAppender(log));
  }

  @Test
  void aRejectedRecordWhoseLockRanOutBehindALongListenerIsDeadLetteredOnce() throws Exception {
    sendInOneBatch(
        order(TOPIC, "K-1", "charge 1.00", "O-1"),
        order(TOPIC, "K-2", RejectingDeserializer.POISON + " charge 2.00", "P-2"),
        order(TOPIC, "K-3", "charge 3.00", "O-3"));

    await().atMost(WAIT).until(() -> SpringTestEnvironment.effects(jdbc, TOPIC, "O-1") == 1);
    await().atMost(WAIT).until(() -> SpringTestEnvironment.effects(jdbc, TOPIC, "O-3") == 1);
    await().atMost(WAIT).until(() -> deadLetters.contains("P-2"));
    Thread.sleep(LOCK.multipliedBy(2).toMillis()); // time for a second dead letter, if any
    assertThat(poisonReads.get())
        .as("deliveries of P-2: its REJECT refused, its lock having run out in the buffer")
        .isGreaterThanOrEqualTo(2);
    assertThat(deadLetters).as("dead letters of P-2").containsOnlyOnce("P-2");
    // One event, the lock of its first delivery run out in the buffer: one WARN. The consumer's
    // wrapper added two (the lock run out as it polled, the RELEASE dropped) to the worker's.
    assertThat(warnings(TOPIC + "-0@1"))
        .as("WARNs naming P-2, its first delivery's lock run out before it was handed over")
        .hasSize(1);
    assertThat(SpringTestEnvironment.effects(jdbc, TOPIC, "O-1")).isEqualTo(1);
    assertThat(TestShareGroups.remaining(TOPIC, TOPIC, Duration.ofSeconds(2)))
        .as("left in the queue")
        .isEmpty();
  }

  /**
   * As above, with a second consumer in the group, which the broker hands the rejected record to
   * once its lock ran out in the first consumer's buffer: it writes the dead letter. The first
   * consumer counted the lock of the record its poll then threw for from that poll, not from the
   * fetch long before, and wrote a second one.
   */
  @Test
  void aRejectedRecordWhoseLockRanOutInTheBufferIsDeadLetteredOnceWithTwoConsumers()
      throws Exception {
    sendInOneBatch(
        order(TWO_CONSUMERS, "K-11", "charge 11.00", "O-11"),
        order(TWO_CONSUMERS, "K-12", RejectingDeserializer.POISON + " charge 12.00", "P-12"),
        order(TWO_CONSUMERS, "K-13", "charge 13.00", "O-13"));

    await()
        .atMost(WAIT)
        .until(() -> SpringTestEnvironment.effects(jdbc, TWO_CONSUMERS, "O-11") == 1);
    await()
        .atMost(WAIT)
        .until(() -> SpringTestEnvironment.effects(jdbc, TWO_CONSUMERS, "O-13") == 1);
    await().atMost(WAIT).until(() -> deadLetters.contains("P-12"));
    Thread.sleep(LOCK.multipliedBy(2).toMillis()); // time for a second dead letter, if any
    assertThat(deadLetters).as("dead letters of P-12").containsOnlyOnce("P-12");
    assertThat(TestShareGroups.remaining(TWO_CONSUMERS, TWO_CONSUMERS, Duration.ofSeconds(2)))
        .as("left in the queue")
        .isEmpty();
  }

  private List<String> warnings(String naming) {
    List<ILoggingEvent> events;
    synchronized (log) { // the lock under which the appender appends
      events = List.copyOf(log.list);
    }
    return events.stream()
        .filter(event -> event.getLevel() == Level.WARN)
        .map(ILoggingEvent::getFormattedMessage)
        .filter(message -> message.contains(naming))
        .toList();
  }

  /** In one batch, as a busy producer sends them: the broker acquires them in one fetch. */
  @SafeVarargs
  private static void sendInOneBatch(ProducerRecord<String, String>... records) throws Exception {
    try (KafkaProducer<String, String> producer =
        new KafkaProducer<>(
            Map.of(
                ProducerConfig.BOOTSTRAP_SERVERS_CONFIG,
                TestKafka.bootstrapServers(),
                ProducerConfig.LINGER_MS_CONFIG,
                200),
            new StringSerializer(),
            new StringSerializer())) {
      List<Future<?>> sent = new ArrayList<>();
      for (ProducerRecord<String, String> record : records) {
        sent.add(producer.send(record));
      }
      producer.flush();
      for (Future<?> each : sent) {
        each.get();
      }
    }
  }

  private static ProducerRecord<String, String> order(
      String topic, String key, String value, String orderNo) {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, key, value);
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    return record;
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.shareFactory(
          ShareListenerTests.consumerConfig(
              StringDeserializer.class, CountingRejectingDeserializer.class));
    }

    @Bean
    DeadLetterHandler<String, String> deadLetterHandler() {
      return ShareListenerTests.undeserializableOnly(
          (record, reason) -> {
            deadLetters.add(header(record, "order-no"));
          });
    }

    @Bean
    Listener listener(JdbcTemplate jdbc) {
      return new Listener(jdbc);
    }
  }

  /** Counts the poisoned values it rejects. */
  public static class CountingRejectingDeserializer extends RejectingDeserializer {
    @Override
    public String deserialize(String topic, byte[] data) {
      if (data != null
          && new String(data, StandardCharsets.UTF_8).startsWith(RejectingDeserializer.POISON)) {
        poisonReads.incrementAndGet();
      }
      return super.deserialize(topic, data);
    }
  }

  static class Listener {
    private final JdbcTemplate jdbc;

    Listener(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "poll-rejected-late-reject", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void handle(ConsumerRecord<String, String> record) throws InterruptedException {
      String orderNo = header(record, "order-no");
      calls.add(orderNo + "/" + record.deliveryCount().orElse((short) 0));
      if (orderNo.equals("O-1")) {
        Thread.sleep(FIRST_LISTENER_TAKES.toMillis());
      }
      SpringTestEnvironment.effect(jdbc, TOPIC, orderNo, record.value());
    }

    @Idempotent(bizType = "poll-rejected-late-reject-two", header = "order-no")
    @KafkaListener(
        id = TWO_CONSUMERS,
        topics = TWO_CONSUMERS,
        groupId = TWO_CONSUMERS,
        containerFactory = "shareFactory",
        concurrency = "2")
    public void handleOnTwo(ConsumerRecord<String, String> record) throws InterruptedException {
      String orderNo = header(record, "order-no");
      if (orderNo.equals("O-11")) {
        Thread.sleep(FIRST_LISTENER_TAKES.toMillis());
      }
      SpringTestEnvironment.effect(jdbc, TWO_CONSUMERS, orderNo, record.value());
    }
  }
}
