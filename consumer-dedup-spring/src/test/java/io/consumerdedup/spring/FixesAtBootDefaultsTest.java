package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.effect;
import static io.consumerdedup.spring.SpringTestEnvironment.effects;
import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
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
import org.apache.kafka.common.TopicPartition;
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
 * configured as {@code spring.kafka.listener.ack-mode=manual} configures it. And fixes whose test
 * needs nothing but those defaults, which share this application rather than start one each (each
 * application started costs seconds, twice in CI: once per Spring Boot line). A real PostgreSQL and
 * the in-JVM broker.
 */
@SpringBootTest(classes = FixesAtBootDefaultsTest.App.class)
@DirtiesContext
class FixesAtBootDefaultsTest {
  static final Duration WAIT = Duration.ofSeconds(20);
  static final String NACK = "bd-nack";
  static final String BATCH = "bd-batch-commit";
  static final String RECORD = "bd-record-commit";
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
    SpringTestEnvironment.prepare(registry, "bootdefaults", NACK, BATCH, RECORD);
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

  private DedupStatus status(String bizType, String orderNo) {
    return store.find(DedupKey.of(bizType, orderNo)).map(DedupRecord::status).orElse(null);
  }

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
