package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupAttemptsExhaustedException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import java.util.List;
import java.util.function.Function;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
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
import org.springframework.kafka.listener.BatchInterceptor;
import org.springframework.kafka.listener.BatchListenerFailedException;
import org.springframework.kafka.listener.CommonDelegatingErrorHandler;
import org.springframework.kafka.listener.CommonErrorHandler;
import org.springframework.kafka.listener.CommonMixedErrorHandler;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.util.backoff.FixedBackOff;

/**
 * {@code consumer-dedup.max-attempts=2} with a {@code DefaultErrorHandler} told to keep a record's
 * retry state when its exception changes ({@code setResetStateOnExceptionChange(false)}), which
 * would deliver a record ten times: a record whose second attempt fails goes to the dead-letter
 * topic at once, from a record listener and from a batch listener alike, and its dead letter names
 * why in spring-kafka's usual headers, no class of consumer-dedup's own internals. The same with
 * that handler inside one of spring-kafka's composite handlers: a {@code
 * CommonDelegatingErrorHandler} (a handler per exception type) for a record listener, a {@code
 * CommonMixedErrorHandler} (one handler for record listeners, one for batch listeners) for a batch
 * listener.
 */
@SpringBootTest(
    classes = SpentAttemptsKeptRetryStateTest.App.class,
    properties = "consumer-dedup.max-attempts=2")
@DirtiesContext
class SpentAttemptsKeptRetryStateTest {
  /** Per key, how often the listener was given its record. */
  static final Counts<String> calls = new Counts<>();

  /** Per key, how often the container delivered its record to the batch listener. */
  static final Counts<String> batchDeliveries = new Counts<>();

  static final Duration WAIT = Duration.ofSeconds(30);
  static final String RECORD = "spent-kept-state-record";
  static final String BATCH = "spent-kept-state-batch";
  static final String DELEGATING = "spent-kept-state-delegating";
  static final String MIXED = "spent-kept-state-mixed";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "spring_spent_kept_state",
        RECORD,
        RECORD + "-dlt",
        BATCH,
        BATCH + "-dlt",
        DELEGATING,
        DELEGATING + "-dlt",
        MIXED,
        MIXED + "-dlt");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired DeliveryCounter<String> recordDeliveries;

  /**
   * It went on with the back-off its first attempt's failure began: delivered eight more times, a
   * second apart, its claim given back as spent each time, the record behind it waiting.
   */
  @Test
  void aRecordListenersLastFailedAttemptIsDeadLetteredAtOnce() throws Exception {
    send(template, RECORD, "always declined", "order-no", "R-FAIL");
    send(template, RECORD, "charge 5", "order-no", "R-AFTER");

    awaitApplied(RECORD, "R-AFTER", recordDeliveries::of, "R-FAIL");
    assertThat(recordDeliveries.of("R-FAIL"))
        .as("deliveries of R-FAIL: its last attempt's failure went to the recoverer at once")
        .isEqualTo(2);
    assertThat(calls.of("R-FAIL")).as("listener runs for R-FAIL").isEqualTo(2);
    ConsumerRecord<String, String> deadLetter = readTopic(RECORD + "-dlt", 1, WAIT).get(0);
    assertThat(header(deadLetter, "kafka_dlt-exception-cause-fqcn"))
        .isEqualTo(DedupAttemptsExhaustedException.class.getName());
    assertThat(header(deadLetter, "kafka_dlt-exception-message"))
        .contains("Gave up after 2 failed attempts of at most 2", "declined at call 2");
    assertThat(store.find(DedupKey.of("kept-state", "R-FAIL")).orElseThrow().attempts())
        .isEqualTo(2);
  }

  /** As for a record listener, the same record stopping a batch listener's batch. */
  @Test
  void aBatchRecordsLastFailedAttemptIsDeadLetteredAtOnceNamingWhy() throws Exception {
    send(template, BATCH, "always declined", "order-no", "B-FAIL");
    send(template, BATCH, "charge 5", "order-no", "B-AFTER");

    awaitApplied(BATCH, "B-AFTER", batchDeliveries::of, "B-FAIL");
    assertThat(batchDeliveries.of("B-FAIL"))
        .as("deliveries of B-FAIL: its last attempt's failure went to the recoverer at once")
        .isEqualTo(2);
    assertThat(calls.of("B-FAIL")).as("listener runs for B-FAIL").isEqualTo(2);
    ConsumerRecord<String, String> deadLetter = readTopic(BATCH + "-dlt", 1, WAIT).get(0);
    // The record a batch listener failed at, as spring-kafka names it for any batch listener.
    assertThat(header(deadLetter, "kafka_dlt-exception-cause-fqcn"))
        .isEqualTo(BatchListenerFailedException.class.getName());
    assertThat(header(deadLetter, "kafka_dlt-exception-message"))
        .contains("Gave up after 2 failed attempts of at most 2", "declined at call 2");
    assertThat(header(deadLetter, "kafka_dlt-exception-stacktrace"))
        .contains(DedupAttemptsExhaustedException.class.getName() + ": Gave up after 2");
    assertThat(store.find(DedupKey.of("kept-state-batch", "B-FAIL")).orElseThrow().attempts())
        .isEqualTo(2);
  }

  @Test
  void aRecordListenersLastFailedAttemptUnderADelegatingHandlerIsDeadLetteredAtOnce()
      throws Exception {
    send(template, DELEGATING, "always declined", "order-no", "D-FAIL");
    send(template, DELEGATING, "charge 5", "order-no", "D-AFTER");

    awaitApplied(DELEGATING, "D-AFTER", recordDeliveries::of, "D-FAIL");
    assertThat(recordDeliveries.of("D-FAIL"))
        .as("deliveries of D-FAIL: its last attempt's failure went to the recoverer at once")
        .isEqualTo(2);
    assertThat(calls.of("D-FAIL")).as("listener runs for D-FAIL").isEqualTo(2);
    ConsumerRecord<String, String> deadLetter = readTopic(DELEGATING + "-dlt", 1, WAIT).get(0);
    assertThat(header(deadLetter, "kafka_dlt-exception-cause-fqcn"))
        .isEqualTo(DedupAttemptsExhaustedException.class.getName());
  }

  @Test
  void aBatchRecordsLastFailedAttemptUnderAMixedHandlerIsDeadLetteredAtOnce() throws Exception {
    send(template, MIXED, "always declined", "order-no", "M-FAIL");
    send(template, MIXED, "charge 5", "order-no", "M-AFTER");

    awaitApplied(MIXED, "M-AFTER", batchDeliveries::of, "M-FAIL");
    assertThat(batchDeliveries.of("M-FAIL"))
        .as("deliveries of M-FAIL: its last attempt's failure went to the recoverer at once")
        .isEqualTo(2);
    assertThat(calls.of("M-FAIL")).as("listener runs for M-FAIL").isEqualTo(2);
    ConsumerRecord<String, String> deadLetter = readTopic(MIXED + "-dlt", 1, WAIT).get(0);
    assertThat(header(deadLetter, "kafka_dlt-exception-message"))
        .contains("Gave up after 2 failed attempts of at most 2", "declined at call 2");
  }

  private void awaitApplied(
      String topic, String key, Function<String, Integer> deliveries, String failing) {
    await()
        .atMost(WAIT)
        .untilAsserted(
            () ->
                assertThat(SpringTestEnvironment.effects(jdbc, topic, key))
                    .as(
                        "%s, applied (deliveries of %s so far: %d)",
                        key, failing, deliveries.apply(failing))
                    .isEqualTo(1));
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      return keepingRetryState(template);
    }

    /** Ten deliveries, a second apart, the retry state kept when the exception changes. */
    private static DefaultErrorHandler keepingRetryState(KafkaTemplate<Object, Object> template) {
      DefaultErrorHandler handler = SpringTestEnvironment.deadLettering(template, 1_000, 9);
      handler.setResetStateOnExceptionChange(false);
      return handler;
    }

    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> delegatingFactory(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        KafkaTemplate<Object, Object> template) {
      CommonDelegatingErrorHandler handler =
          new CommonDelegatingErrorHandler(keepingRetryState(template));
      handler.addDelegate(
          ArithmeticException.class, new DefaultErrorHandler(new FixedBackOff(0, 0)));
      return factory(configurer, consumerFactory, handler);
    }

    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> mixedFactory(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        KafkaTemplate<Object, Object> template) {
      CommonMixedErrorHandler handler =
          new CommonMixedErrorHandler(
              new DefaultErrorHandler(new FixedBackOff(0, 0)), keepingRetryState(template));
      return factory(configurer, consumerFactory, handler);
    }

    private static ConcurrentKafkaListenerContainerFactory<Object, Object> factory(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        CommonErrorHandler handler) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.setCommonErrorHandler(handler);
      return factory;
    }

    @Bean
    DeliveryCounter<String> recordDeliveries() {
      return new DeliveryCounter<>(record -> header(record, "order-no"));
    }

    @Bean
    BatchInterceptor<Object, Object> batchDeliveryCounter() {
      return new BatchInterceptor<>() {
        @Override
        public ConsumerRecords<Object, Object> intercept(
            ConsumerRecords<Object, Object> records, Consumer<Object, Object> consumer) {
          for (ConsumerRecord<Object, Object> record : records) {
            batchDeliveries.count(header(record, "order-no"));
          }
          return records;
        }
      };
    }

    @Bean
    Charges charges(JdbcTemplate jdbc) {
      return new Charges(jdbc);
    }
  }

  static class Charges {
    private final JdbcTemplate jdbc;

    Charges(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "kept-state", header = "order-no")
    @KafkaListener(id = RECORD, topics = RECORD)
    public void charge(ConsumerRecord<String, String> record) {
      chargeOne(record);
    }

    @Idempotent(bizType = "kept-state-batch", header = "order-no")
    @KafkaListener(id = BATCH, topics = BATCH, batch = "true")
    public void chargeBatch(List<ConsumerRecord<String, String>> records) {
      chargeAll(records);
    }

    @Idempotent(bizType = "kept-state-delegating", header = "order-no")
    @KafkaListener(id = DELEGATING, topics = DELEGATING, containerFactory = "delegatingFactory")
    public void chargeUnderDelegatingHandler(ConsumerRecord<String, String> record) {
      chargeOne(record);
    }

    @Idempotent(bizType = "kept-state-mixed", header = "order-no")
    @KafkaListener(id = MIXED, topics = MIXED, batch = "true", containerFactory = "mixedFactory")
    public void chargeBatchUnderMixedHandler(List<ConsumerRecord<String, String>> records) {
      chargeAll(records);
    }

    /** Declines the keys ending in -FAIL, applies the others. */
    private void chargeOne(ConsumerRecord<String, String> record) {
      String key = header(record, "order-no");
      int call = calls.count(key);
      if (key.endsWith("-FAIL")) {
        throw new IllegalStateException("declined at call " + call);
      }
      SpringTestEnvironment.effect(jdbc, record.topic(), key, record.value());
    }

    /** As {@link #chargeOne}, naming the record a batch stopped at. */
    private void chargeAll(List<ConsumerRecord<String, String>> records) {
      for (int i = 0; i < records.size(); i++) {
        ConsumerRecord<String, String> record = records.get(i);
        String key = header(record, "order-no");
        int call = calls.count(key);
        if (key.endsWith("-FAIL")) {
          throw new BatchListenerFailedException(
              "declined", new IllegalStateException("declined at call " + call), i);
        }
        SpringTestEnvironment.effect(jdbc, record.topic(), key, record.value());
      }
    }
  }
}
