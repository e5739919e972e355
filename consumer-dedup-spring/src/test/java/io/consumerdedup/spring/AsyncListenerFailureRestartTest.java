package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.testing.TestKafka;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.CommonErrorHandler;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.test.utils.KafkaTestUtils;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.util.backoff.FixedBackOff;

/**
 * A listener returning a {@code CompletableFuture} whose future fails, with the application's own
 * {@code DefaultErrorHandler(FixedBackOff(15 s, 3))}, and its container stopped and started again
 * during the back-off (a deploy, a rebalance): spring-kafka acknowledges a failed future, so unless
 * consumer-dedup hands the failure to the container before anything is acknowledged, the offset is
 * committed past the FAILED record and the restarted container never sees it again.
 */
@SpringBootTest(classes = AsyncListenerFailureRestartTest.App.class)
@DirtiesContext
class AsyncListenerFailureRestartTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String TOPIC = "async-restart";
  static final AtomicInteger calls = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_async_restart", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry registry;

  @Test
  void aFailedFutureIsAppliedAfterARestartDuringTheBackOff() throws Exception {
    DedupKey key = DedupKey.of("async-restart", "A-1");
    send(template, TOPIC, "charge 7", "order-no", "A-1");

    // The fault: the listener's future failed, and its key is FAILED.
    await()
        .atMost(WAIT)
        .until(() -> store.find(key).map(DedupRecord::status).orElse(null) == DedupStatus.FAILED);
    assertThat(calls.get()).isEqualTo(1);

    MessageListenerContainer container = registry.getListenerContainer(TOPIC);
    container.stop(); // within the 15 s back-off: the retry has not run yet
    assertThat(calls.get()).as("stopped during the back-off, before the retry").isEqualTo(1);
    assertThat(committed()).as("nothing committed past the failed record").isEmpty();

    container.start();
    await().atMost(WAIT).until(() -> effects("A-1") == 1);
    await().atMost(WAIT).until(() -> committed().orElse(-1L) == 1L);
    assertThat(effects("A-1")).isEqualTo(1);
    DedupRecord record = store.find(key).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).as("the failed attempt, then the one after restart").isEqualTo(2);
  }

  private Optional<Long> committed() throws Exception {
    OffsetAndMetadata offset =
        KafkaTestUtils.getCurrentOffset(TestKafka.bootstrapServers(), TOPIC, TOPIC, 0);
    return Optional.ofNullable(offset).map(OffsetAndMetadata::offset);
  }

  private int effects(String bizKey) {
    return SpringTestEnvironment.effects(jdbc, "async-restart", bizKey);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Charges charges(JdbcTemplate jdbc) {
      return new Charges(jdbc);
    }

    @Bean
    CommonErrorHandler errorHandler() {
      return new DefaultErrorHandler(new FixedBackOff(15_000, 3));
    }
  }

  static class Charges {
    final JdbcTemplate jdbc;

    Charges(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "async-restart", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public CompletableFuture<Void> charge(ConsumerRecord<String, String> record) {
      boolean fail = calls.incrementAndGet() == 1;
      return CompletableFuture.runAsync(
          () -> {
            if (fail) {
              throw new IllegalStateException("the downstream call failed");
            }
            SpringTestEnvironment.effect(
                jdbc, "async-restart", header(record, "order-no"), record.value());
          });
    }
  }
}
