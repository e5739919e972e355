package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.BatchInterceptor;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A plain batch listener (not {@code @Idempotent}) that calls an {@code @Idempotent} method of
 * another bean once per record. Given the record, the method claims it and applies it once; given
 * only the payload, it has no record to take its key from: the batch is held, and the error must
 * say what to change for such a method (pass it the record), not tell it to set {@code batch =
 * "true"} on a {@code @KafkaListener} it does not have.
 */
@SpringBootTest(
    classes = BatchListenerCallingIdempotentMethodTest.App.class,
    properties = {
      "consumer-dedup.hold.initial-backoff=200ms",
      "consumer-dedup.hold.max-backoff=400ms"
    })
@DirtiesContext
class BatchListenerCallingIdempotentMethodTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String WITH_RECORD = "bcim-with-record";
  static final String PAYLOAD_ONLY = "bcim-payload-only";
  static final List<String> failures = new CopyOnWriteArrayList<>();
  static final Map<String, AtomicInteger> applied = new ConcurrentHashMap<>();
  static final AtomicInteger payloadOnlyCalls = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_batch_calling", WITH_RECORD, PAYLOAD_ONLY);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;

  @Test
  void aMethodGivenItsRecordAppliesEachKeyOnce() throws Exception {
    send(template, WITH_RECORD, "reserve 1", "order-no", "WR-1");
    send(template, WITH_RECORD, "reserve 2", "order-no", "WR-2");
    send(template, WITH_RECORD, "reserve 1 again", "order-no", "WR-1");

    await()
        .atMost(WAIT)
        .until(() -> SpringTestEnvironment.committed(WITH_RECORD, WITH_RECORD, 0) >= 3);
    assertThat(applied.get("WR-1")).as("times WR-1 applied").hasValue(1);
    assertThat(applied.get("WR-2")).as("times WR-2 applied").hasValue(1);
    assertThat(store.find(DedupKey.of("bcim", "WR-1")))
        .hasValueSatisfying(r -> assertThat(r.status()).isEqualTo(DedupStatus.SUCCESS));
  }

  @Test
  void aMethodGivenOnlyThePayloadHoldsTheBatchSayingToPassItTheRecord() throws Exception {
    send(template, PAYLOAD_ONLY, "reserve 3", "order-no", "PO-1");

    await().atMost(WAIT).until(() -> failures.size() >= 3);
    assertThat(SpringTestEnvironment.committed(PAYLOAD_ONLY, PAYLOAD_ONLY, 0))
        .as("committed past a batch whose method never ran")
        .isLessThanOrEqualTo(0);
    assertThat(failures.get(0))
        .contains(DedupConfigurationException.class.getName())
        .contains("BatchListenerCallingIdempotentMethodTest$Reservations#reserveByPayload")
        .contains("pass it the ConsumerRecord")
        .doesNotContain("batch = \"true\"");
    assertThat(payloadOnlyCalls).hasValue(0);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Reservations reservations() {
      return new Reservations();
    }

    @Bean
    BatchListeners batchListeners(Reservations reservations) {
      return new BatchListeners(reservations);
    }

    /** Records what each failed batch threw, with every cause. */
    @Bean
    BatchInterceptor<Object, Object> failureRecorder() {
      return SpringTestEnvironment.batchFailureRecorder(failures);
    }
  }

  static class Reservations {
    @Idempotent(bizType = "bcim", header = "order-no")
    public void reserve(ConsumerRecord<String, String> record) {
      applied
          .computeIfAbsent(
              new String(record.headers().lastHeader("order-no").value()), k -> new AtomicInteger())
          .incrementAndGet();
    }

    @Idempotent(bizType = "bcim-payload", header = "order-no")
    public void reserveByPayload(String payload) {
      payloadOnlyCalls.incrementAndGet();
    }
  }

  static class BatchListeners {
    private final Reservations reservations;

    BatchListeners(Reservations reservations) {
      this.reservations = reservations;
    }

    @KafkaListener(id = WITH_RECORD, topics = WITH_RECORD, batch = "true")
    public void reserveAll(List<ConsumerRecord<String, String>> records) {
      records.forEach(reservations::reserve);
    }

    @KafkaListener(id = PAYLOAD_ONLY, topics = PAYLOAD_ONLY, batch = "true")
    public void reserveAllPayloads(List<String> payloads) {
      payloads.forEach(reservations::reserveByPayload);
    }
  }
}
