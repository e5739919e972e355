package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.effects;
import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
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
import org.springframework.kafka.support.KafkaHeaders;
import org.springframework.messaging.Message;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A listener that casts the {@code Consumer} it is given to {@code KafkaConsumer}, at Spring Boot's
 * defaults (no error handler of the application's): consumer-dedup hands its listeners a wrapper of
 * the container's consumer, so the cast throws a {@code ClassCastException}, which spring-kafka's
 * {@code DefaultErrorHandler} does not retry. The record went straight to the recoverer, logged and
 * committed past, never applied, its key FAILED with no one to retry it. Now the failure is the
 * listener's, counted and retried like any other, and named for what it is.
 */
@SpringBootTest(classes = WrappedConsumerCastTest.App.class)
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class WrappedConsumerCastTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String ALWAYS = "cast-always";
  static final String ONCE = "cast-once";
  static final String HEADER = "cast-header";
  static final String BATCH = "cast-batch";
  static final String ASYNC = "cast-async";
  static final String CLASS_CAST = "cast-class-cast";

  /** Per listener, how often it ran. */
  static final Counts<String> calls = new Counts<>();

  /** Per listener, how often it was handed something other than a KafkaConsumer and cast it. */
  static final Counts<String> casts = new Counts<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry, "spring_cast", ALWAYS, ONCE, HEADER, BATCH, ASYNC, CLASS_CAST);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;

  @Test
  void aListenerCastingItsConsumerIsRetriedAsAnyFailureThenGivenUpNamingTheWrapper(
      CapturedOutput output) throws Exception {
    SpringTestEnvironment.send(template, ALWAYS, "charge 5.00", "order-no", "A-1");

    await()
        .atMost(WAIT)
        .until(() -> SpringTestEnvironment.committed(ALWAYS, ALWAYS, 0) == 1 && given(output));
    assertThat(casts.of(ALWAYS)).as("casts that failed").isEqualTo(calls.of(ALWAYS));
    assertThat(calls.of(ALWAYS))
        .as("listener runs: every attempt of consumer-dedup.max-attempts")
        .isEqualTo(10);
    DedupRecord row = store.find(DedupKey.of(ALWAYS, "A-1")).orElseThrow();
    assertThat(row.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(row.attempts()).isEqualTo(10);
    List<String> lines = output.getAll().lines().toList();
    assertThat(lines)
        .filteredOn(line -> line.contains("Handler failed for " + ALWAYS + "-0@0"))
        .hasSize(10)
        .allSatisfy(
            line ->
                assertThat(line)
                    .contains("WrappedConsumerCastException")
                    .contains("a wrapper")
                    .contains("org.apache.kafka.clients.consumer.Consumer interface"));
    String givenUp = givenUpLine(output);
    assertThat(givenUp)
        .contains("Gave up after 10 failed attempts of at most 10")
        .contains("WrappedConsumerCastException");
    assertThat(output.getAll())
        .as("the cast's own exception, as the cause")
        .contains("Caused by: java.lang.ClassCastException");
  }

  @Test
  void aRecordListenerCastingItsConsumerArgumentOnceIsAppliedOnItsRetry() {
    order(ONCE, "O-1");

    assertAppliedOnceAfterAFailedCast(ONCE, "O-1");
  }

  @Test
  void aListenerCastingTheConsumerHeaderOfItsMessageOnceIsAppliedOnItsRetry() {
    order(HEADER, "H-1");

    assertAppliedOnceAfterAFailedCast(HEADER, "H-1");
  }

  @Test
  void aBatchListenerCastingItsConsumerOnceHasItsBatchAppliedOnItsRetry() {
    order(BATCH, "B-1");

    assertAppliedOnceAfterAFailedCast(BATCH, "B-1");
  }

  @Test
  void anAsyncListenerWhoseWorkCastsTheConsumerOnceIsAppliedOnItsRetry() {
    order(ASYNC, "F-1");

    assertAppliedOnceAfterAFailedCast(ASYNC, "F-1");
  }

  /**
   * {@code KafkaConsumer.class.cast(consumer)} words its exception otherwise ("Cannot cast ... to
   * ..."), and was not recognised: the record was skipped at its first failure.
   */
  @Test
  void aListenerCastingWithClassCastOnceIsAppliedOnItsRetry() {
    order(CLASS_CAST, "C-1");

    assertAppliedOnceAfterAFailedCast(CLASS_CAST, "C-1");
  }

  private void order(String topic, String orderNo) {
    try {
      SpringTestEnvironment.send(template, topic, "charge " + orderNo, "order-no", orderNo);
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
  }

  private void assertAppliedOnceAfterAFailedCast(String listener, String orderNo) {
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> {
              assertThat(effects(jdbc, listener, orderNo))
                  .as("[%s applied] (casts that failed: %d)", listener, casts.of(listener))
                  .isEqualTo(1);
              // written after the listener returns, so after its effect
              assertThat(store.find(DedupKey.of(listener, orderNo)).orElseThrow().status())
                  .isEqualTo(DedupStatus.SUCCESS);
            });
    assertThat(casts.of(listener)).as("casts that failed").isEqualTo(1);
    assertThat(calls.of(listener)).isEqualTo(2);
    DedupRecord row = store.find(DedupKey.of(listener, orderNo)).orElseThrow();
    assertThat(row.attempts()).as("the failed cast counted").isEqualTo(2);
  }

  private static boolean given(CapturedOutput output) {
    return givenUpLine(output) != null;
  }

  private static String givenUpLine(CapturedOutput output) {
    return output
        .getAll()
        .lines()
        .filter(line -> line.contains(" ERROR ") && line.contains("Gave up on " + ALWAYS + "-0@0"))
        .findFirst()
        .orElse(null);
  }

  /**
   * Casts {@code consumer} the way a listener written before consumer-dedup did, counting the casts
   * that fail (the fault this test is about).
   */
  static void castToKafkaConsumer(String listener, Object consumer) {
    if (!(consumer instanceof KafkaConsumer<?, ?>)) {
      casts.count(listener);
    }
    ((KafkaConsumer<?, ?>) consumer).groupMetadata();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Charges charges(JdbcTemplate jdbc) {
      return new Charges(jdbc);
    }
  }

  static class Charges {
    final JdbcTemplate jdbc;

    Charges(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = ALWAYS, header = "order-no")
    @KafkaListener(id = ALWAYS, topics = ALWAYS)
    public void always(ConsumerRecord<String, String> record, Consumer<?, ?> consumer) {
      calls.count(ALWAYS);
      castToKafkaConsumer(ALWAYS, consumer);
    }

    @Idempotent(bizType = ONCE, header = "order-no")
    @KafkaListener(id = ONCE, topics = ONCE)
    public void once(ConsumerRecord<String, String> record, Consumer<?, ?> consumer) {
      if (calls.count(ONCE) == 1) {
        castToKafkaConsumer(ONCE, consumer);
      }
      SpringTestEnvironment.effect(jdbc, ONCE, header(record, "order-no"), record.value());
    }

    @Idempotent(bizType = CLASS_CAST, header = "order-no")
    @KafkaListener(id = CLASS_CAST, topics = CLASS_CAST)
    public void classCast(ConsumerRecord<String, String> record, Consumer<?, ?> consumer) {
      if (calls.count(CLASS_CAST) == 1) {
        if (!(consumer instanceof KafkaConsumer<?, ?>)) {
          casts.count(CLASS_CAST);
        }
        KafkaConsumer.class.cast(consumer).groupMetadata();
      }
      SpringTestEnvironment.effect(jdbc, CLASS_CAST, header(record, "order-no"), record.value());
    }

    @Idempotent(bizType = HEADER, header = "order-no")
    @KafkaListener(id = HEADER, topics = HEADER)
    public void fromHeader(Message<String> message) {
      if (calls.count(HEADER) == 1) {
        castToKafkaConsumer(HEADER, message.getHeaders().get(KafkaHeaders.CONSUMER));
      }
      String orderNo = message.getPayload().substring("charge ".length());
      SpringTestEnvironment.effect(jdbc, HEADER, orderNo, message.getPayload());
    }

    @Idempotent(bizType = BATCH, header = "order-no")
    @KafkaListener(id = BATCH, topics = BATCH, batch = "true")
    public void batch(List<ConsumerRecord<String, String>> records, Consumer<?, ?> consumer) {
      if (calls.count(BATCH) == 1) {
        castToKafkaConsumer(BATCH, consumer);
      }
      for (ConsumerRecord<String, String> record : records) {
        SpringTestEnvironment.effect(jdbc, BATCH, header(record, "order-no"), record.value());
      }
    }

    @Idempotent(bizType = ASYNC, header = "order-no")
    @KafkaListener(id = ASYNC, topics = ASYNC)
    public CompletableFuture<Void> async(
        ConsumerRecord<String, String> record, Consumer<?, ?> consumer) {
      boolean cast = calls.count(ASYNC) == 1;
      return CompletableFuture.runAsync(
          () -> {
            if (cast) {
              castToKafkaConsumer(ASYNC, consumer);
            }
            SpringTestEnvironment.effect(jdbc, ASYNC, header(record, "order-no"), record.value());
          });
    }
  }
}
