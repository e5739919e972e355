package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupAttemptsExhaustedException;
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
 * As {@link SpentAttemptsKeptRetryStateTest}, with the {@code DefaultErrorHandler} inside one of
 * spring-kafka's composite handlers: a {@code CommonDelegatingErrorHandler} (a handler per
 * exception type) for a record listener, a {@code CommonMixedErrorHandler} (one handler for record
 * listeners, one for batch listeners) for a batch listener. A record whose last attempt fails goes
 * to the dead-letter topic at once all the same.
 */
@SpringBootTest(
    classes = SpentAttemptsWrappedErrorHandlerTest.App.class,
    properties = "consumer-dedup.max-attempts=2")
@DirtiesContext
class SpentAttemptsWrappedErrorHandlerTest {
  /** Per key, how often the listener was given its record. */
  static final Counts<String> calls = new Counts<>();

  /** Per key, how often the container delivered its record to the batch listener. */
  static final Counts<String> batchDeliveries = new Counts<>();

  static final Duration WAIT = Duration.ofSeconds(30);
  static final String RECORD = "spent-wrapped-record";
  static final String BATCH = "spent-wrapped-batch";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry, "spring_spent_wrapped", RECORD, RECORD + "-dlt", BATCH, BATCH + "-dlt");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DeliveryCounter<String> recordDeliveries;

  @Test
  void aRecordListenersLastFailedAttemptUnderADelegatingHandlerIsDeadLetteredAtOnce()
      throws Exception {
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
  }

  @Test
  void aBatchRecordsLastFailedAttemptUnderAMixedHandlerIsDeadLetteredAtOnce() throws Exception {
    send(template, BATCH, "always declined", "order-no", "B-FAIL");
    send(template, BATCH, "charge 5", "order-no", "B-AFTER");

    awaitApplied(BATCH, "B-AFTER", batchDeliveries::of, "B-FAIL");
    assertThat(batchDeliveries.of("B-FAIL"))
        .as("deliveries of B-FAIL: its last attempt's failure went to the recoverer at once")
        .isEqualTo(2);
    assertThat(calls.of("B-FAIL")).as("listener runs for B-FAIL").isEqualTo(2);
    ConsumerRecord<String, String> deadLetter = readTopic(BATCH + "-dlt", 1, WAIT).get(0);
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

    @Idempotent(bizType = "wrapped-handler", header = "order-no")
    @KafkaListener(id = RECORD, topics = RECORD, containerFactory = "delegatingFactory")
    public void charge(ConsumerRecord<String, String> record) {
      String key = header(record, "order-no");
      int call = calls.count(key);
      if (key.equals("R-FAIL")) {
        throw new IllegalStateException("declined at call " + call);
      }
      SpringTestEnvironment.effect(jdbc, RECORD, key, record.value());
    }

    @Idempotent(bizType = "wrapped-handler-batch", header = "order-no")
    @KafkaListener(id = BATCH, topics = BATCH, batch = "true", containerFactory = "mixedFactory")
    public void chargeBatch(List<ConsumerRecord<String, String>> records) {
      for (int i = 0; i < records.size(); i++) {
        ConsumerRecord<String, String> record = records.get(i);
        String key = header(record, "order-no");
        int call = calls.count(key);
        if (key.equals("B-FAIL")) {
          throw new BatchListenerFailedException(
              "declined", new IllegalStateException("declined at call " + call), i);
        }
        SpringTestEnvironment.effect(jdbc, BATCH, key, record.value());
      }
    }
  }
}
