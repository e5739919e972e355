package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.deadLetterReason;
import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.kafka.clients.consumer.ConsumerRecord;
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
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.BatchListenerFailedException;
import org.springframework.kafka.listener.DeadLetterPublishingRecoverer;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.util.backoff.FixedBackOff;

/**
 * {@code @Idempotent} listeners that fail with an exception which cannot describe itself: its
 * {@code getMessage()} (and so its {@code toString()}) throws, as an exception that prints a lazily
 * loaded entity does once its persistence context is closed. With {@code max-attempts=2}, an error
 * handler that would try a record ten times, and DEBUG on for consumer-dedup's Spring adapters (as
 * a user looking into the failures turns it on), each such record must run twice, be dead-lettered
 * once, and let the records after it be applied.
 */
@SpringBootTest(
    classes = UnprintableListenerFailureTest.App.class,
    properties = {
      "consumer-dedup.max-attempts=2",
      "logging.level.io.consumerdedup.spring.internal=DEBUG"
    })
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class UnprintableListenerFailureTest {
  /** Per key, how often a listener was given its record. */
  static final Counts<String> calls = new Counts<>();

  /** The keys of the records the error handler's recoverer parked. */
  static final List<String> parked = new CopyOnWriteArrayList<>();

  static final Duration WAIT = Duration.ofSeconds(30);
  // Dead letters are read once the offsets are committed past their records: by then any second
  // copy was published too, and the first poll of the reader returns them all.
  static final String RECORDS = "unprintable-record";
  static final String BATCH = "unprintable-batch";
  static final String WHOLE_BATCH = "unprintable-whole-batch";
  static final String UNRETRIED = "unprintable-unretried";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "spring_unprintable",
        RECORDS,
        RECORDS + "-dlt",
        BATCH,
        BATCH + "-dlt",
        WHOLE_BATCH,
        WHOLE_BATCH + "-dlt",
        UNRETRIED);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry registry;
  @Autowired DeliveryCounter<String> deliveries;

  @Test
  void aRecordListenersUnprintableFailureRunsTwiceIsDeadLetteredOnceAndTheNextRecordIsApplied(
      CapturedOutput output) throws Exception {
    send(template, RECORDS, "charge 5.00", "order-no", "U-1");
    send(template, RECORDS, "charge 5.50", "order-no", "U-WRAPPED");
    send(template, RECORDS, "charge 6.00", "order-no", "U-2");

    await()
        .atMost(WAIT)
        .untilAsserted(
            () ->
                assertThat(SpringTestEnvironment.effects(jdbc, RECORDS, "U-2"))
                    .as("the record after the unprintable failure, applied")
                    .isEqualTo(1));
    await().atMost(WAIT).until(() -> committed(RECORDS) == 3);
    List<ConsumerRecord<String, String>> deadLetters = readTopic(RECORDS + "-dlt", 2, WAIT);
    assertThat(deadLetters)
        .as("dead letters")
        .extracting(record -> header(record, "order-no"))
        .containsExactly("U-1", "U-WRAPPED");
    assertThat(deadLetterReason(deadLetters.get(0)))
        .contains("DedupAttemptsExhaustedException", "Gave up after 2 failed attempts of at most 2")
        .contains(LazyEntityFailure.class.getName());
    assertThat(calls.of("U-1")).as("listener runs for U-1").isEqualTo(2);
    assertThat(deliveries.of("U-1"))
        .as("deliveries of U-1: the second attempt's failure went to the recoverer at once")
        .isEqualTo(2);
    assertThat(calls.of("U-WRAPPED")).as("listener runs for U-WRAPPED").isEqualTo(2);
    assertThat(deliveries.of("U-WRAPPED")).as("deliveries of U-WRAPPED").isEqualTo(2);
    DedupRecord record = store.find(DedupKey.of("unprintable", "U-1")).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(record.attempts()).isEqualTo(2);
    assertThat(output.getAll().lines())
        .filteredOn(line -> line.contains("key unprintable/U-1, attempt 1 of 2"))
        .as("the WARN line of the first attempt")
        .singleElement()
        .satisfies(line -> assertThat(line).contains(LazyEntityFailure.class.getName()));
  }

  /**
   * A batch listener reports the record it failed at, the cause unprintable: the records before and
   * after it are applied once, and only it is dead-lettered.
   */
  @Test
  void aBatchListenersUnprintableFailureAtOneRecordDeadLettersOnlyThatRecord() throws Exception {
    MessageListenerContainer container = registry.getListenerContainer(BATCH);
    container.stop();
    send(template, BATCH, "charge 1", "order-no", "B-1");
    send(template, BATCH, "always failing", "order-no", "B-FAIL");
    send(template, BATCH, "charge 2", "order-no", "B-2");
    container.start();

    await()
        .atMost(WAIT)
        .untilAsserted(
            () ->
                assertThat(SpringTestEnvironment.effects(jdbc, BATCH, "B-2"))
                    .as("the record after the unprintable failure, applied")
                    .isEqualTo(1));
    await().atMost(WAIT).until(() -> committed(BATCH) == 3);
    assertThat(readTopic(BATCH + "-dlt", 1, WAIT))
        .as("dead letters")
        .extracting(record -> header(record, "order-no"))
        .containsExactly("B-FAIL");
    assertThat(SpringTestEnvironment.effects(jdbc, BATCH, "B-1")).isEqualTo(1);
    assertThat(calls.of("B-FAIL")).as("listener runs for B-FAIL").isEqualTo(2);
    assertThat(store.find(DedupKey.of("unprintable-batch", "B-FAIL")).orElseThrow().attempts())
        .isEqualTo(2);
  }

  /**
   * A batch listener fails without naming a record, with an unprintable exception: every record's
   * attempt is counted, and each is dead-lettered once they are spent.
   */
  @Test
  void aBatchListenersUnprintableFailureWithoutARecordCountsItsAttemptsThenDeadLettersIt()
      throws Exception {
    send(template, WHOLE_BATCH, "always failing", "order-no", "W-1");

    await().atMost(WAIT).until(() -> committed(WHOLE_BATCH) == 1);
    assertThat(readTopic(WHOLE_BATCH + "-dlt", 1, WAIT))
        .as("dead letters")
        .extracting(record -> header(record, "order-no"))
        .containsExactly("W-1");
    assertThat(calls.of("W-1")).as("listener runs for W-1").isEqualTo(2);
    DedupRecord record = store.find(DedupKey.of("unprintable-whole", "W-1")).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(record.attempts()).isEqualTo(2);
  }

  /**
   * The error handler does not retry the listener's exception: it hands the record to its recoverer
   * on the first failure, which parks it, and consumer-dedup logs the record given up with that
   * exception.
   */
  @Test
  void anUnprintableFailureTheErrorHandlerDoesNotRetryIsParkedOnce(CapturedOutput output)
      throws Exception {
    send(template, UNRETRIED, "charge 7.00", "order-no", "N-1");

    await().atMost(WAIT).until(() -> committed(UNRETRIED) == 1);
    assertThat(parked).as("records parked by the recoverer").containsExactly("N-1");
    assertThat(calls.of("N-1")).as("listener runs for N-1").isEqualTo(1);
    assertThat(output.getAll().lines())
        .filteredOn(line -> line.contains("Gave up on " + UNRETRIED + "-0@0"))
        .as("the ERROR line of the record given up")
        .singleElement()
        .satisfies(line -> assertThat(line).contains(UnretriedFailure.class.getName()));
  }

  private static long committed(String topic) throws Exception {
    return SpringTestEnvironment.committed(topic, topic, 0);
  }

  /**
   * What a listener throws when it prints an entity loaded lazily, its persistence context closed;
   * with a cause, as such an exception usually has.
   */
  static final class LazyEntityFailure extends RuntimeException {
    private static final long serialVersionUID = 1L;

    LazyEntityFailure() {
      super(new IllegalStateException("the persistence context was closed"));
    }

    @Override
    public String getMessage() {
      throw new UnsupportedOperationException(
          "could not initialize proxy - no persistence context");
    }
  }

  /** One the error handler does not retry. */
  static final class UnretriedFailure extends RuntimeException {
    private static final long serialVersionUID = 1L;

    @Override
    public String getMessage() {
      throw new UnsupportedOperationException(
          "could not initialize proxy - no persistence context");
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    /**
     * Ten deliveries in memory, a tenth of a second apart, then the dead-letter topic; the records
     * of {@link #UNRETRIED} are parked (as an application stores them in a table of its own).
     */
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      DeadLetterPublishingRecoverer deadLetters = new DeadLetterPublishingRecoverer(template);
      DefaultErrorHandler handler =
          new DefaultErrorHandler(
              (record, e) -> {
                if (record.topic().equals(UNRETRIED)) {
                  parked.add(header(record, "order-no"));
                } else {
                  deadLetters.accept(record, e);
                }
              },
              new FixedBackOff(100, 9));
      handler.addNotRetryableExceptions(UnretriedFailure.class);
      return handler;
    }

    /** Per key, how often the container delivered its record. */
    @Bean
    DeliveryCounter<String> deliveries() {
      return new DeliveryCounter<>(record -> header(record, "order-no"));
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

    @Idempotent(bizType = "unprintable", header = "order-no")
    @KafkaListener(id = RECORDS, topics = RECORDS)
    public void charge(ConsumerRecord<String, String> record) {
      String key = header(record, "order-no");
      calls.count(key);
      if (key.equals("U-1")) {
        throw new LazyEntityFailure();
      }
      if (key.equals("U-WRAPPED")) {
        // Printable itself, its cause is not.
        throw new IllegalStateException("charge failed", new LazyEntityFailure());
      }
      SpringTestEnvironment.effect(jdbc, RECORDS, key, record.value());
    }

    @Idempotent(bizType = "unprintable-batch", header = "order-no")
    @KafkaListener(id = BATCH, topics = BATCH, batch = "true")
    public void chargeAll(List<ConsumerRecord<String, String>> records) {
      for (int i = 0; i < records.size(); i++) {
        ConsumerRecord<String, String> record = records.get(i);
        String key = header(record, "order-no");
        calls.count(key);
        if (key.equals("B-FAIL")) {
          throw new BatchListenerFailedException("failed", new LazyEntityFailure(), i);
        }
        SpringTestEnvironment.effect(jdbc, BATCH, key, record.value());
      }
    }

    @Idempotent(bizType = "unprintable-whole", header = "order-no")
    @KafkaListener(id = WHOLE_BATCH, topics = WHOLE_BATCH, batch = "true")
    public void chargeWhole(List<ConsumerRecord<String, String>> records) {
      records.forEach(record -> calls.count(header(record, "order-no")));
      throw new LazyEntityFailure();
    }

    @Idempotent(bizType = "unprintable-unretried", header = "order-no")
    @KafkaListener(id = UNRETRIED, topics = UNRETRIED)
    public void chargeOnce(ConsumerRecord<String, String> record) {
      calls.count(header(record, "order-no"));
      throw new UnretriedFailure();
    }
  }
}
