package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.spring.ShareListenerTests;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * The application stops consumer-dedup's share listener (its stop closes the listener after the
 * containers) on a thread already interrupted, while a handler runs: a shutdown begun from a thread
 * that was interrupted, say. The stop's wait for the handler in hand ended at once on the
 * interrupt: the stop returned while the handler still ran, and the application went on to close
 * what the handler was using (its DataSource), its outcome not recorded. Spring Boot 4.0 refuses
 * share listeners, so the boot40 module leaves this class out.
 */
@SpringBootTest(
    classes = ShareListenerInterruptedCloseTest.App.class,
    properties = "consumer-dedup.share.close-timeout=15s")
@DirtiesContext
class ShareListenerInterruptedCloseTest {
  static final String TOPIC = "share-interrupted-close";
  static final Duration WAIT = Duration.ofSeconds(60);

  /** How long the handler runs: the listener is stopped as it starts. */
  static final Duration HANDLER = Duration.ofSeconds(3);

  static final CountDownLatch started = new CountDownLatch(1);
  static final AtomicLong endedNanos = new AtomicLong();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    ShareListenerTests.prepare(
        registry, "spring_share_interrupted_close", 4, TOPIC, TOPIC + "-dlt");
    TestShareGroups.configure(TOPIC, Duration.ofSeconds(15));
  }

  @Autowired DedupListenerContainersConfigurer configurer;
  @Autowired DedupStore store;

  /**
   * The user sees the charge recorded as a SUCCESS by the time the application's stop returned, and
   * the stopping thread still interrupted afterwards, as it was.
   */
  @Test
  void aStopOnAnInterruptedThreadStillWaitsForTheHandlerInHand() throws Exception {
    try (KafkaProducer<String, String> producer = TestKafka.producer()) {
      ProducerRecord<String, String> record = new ProducerRecord<>(TOPIC, "charge 6.00");
      record.headers().add("order-no", "S-1".getBytes(StandardCharsets.UTF_8));
      producer.send(record).get();
    }
    assertThat(started.await(WAIT.toSeconds(), TimeUnit.SECONDS))
        .as("the handler started")
        .isTrue();

    AtomicLong stopNanos = new AtomicLong();
    AtomicBoolean stillInterrupted = new AtomicBoolean();
    AtomicReference<DedupStatus> statusOnReturn = new AtomicReference<>();
    Thread stopping =
        new Thread(
            () -> {
              Thread.currentThread().interrupt();
              stopNanos.set(System.nanoTime());
              // What the application's stop does once the containers stopped; this container
              // still runs, so that nothing else waits for the handler meanwhile.
              configurer.stop();
              stillInterrupted.set(Thread.interrupted());
              statusOnReturn.set(
                  store.find(DedupKey.of(TOPIC, "S-1")).map(r -> r.status()).orElse(null));
            },
            "stopping " + TOPIC);
    stopping.start();
    stopping.join(WAIT.toMillis());
    await().atMost(WAIT).until(() -> endedNanos.get() != 0);

    assertThat(endedNanos.get() - stopNanos.get())
        .as("the handler was still running when the stop began")
        .isPositive();
    assertThat(statusOnReturn.get())
        .as("[the charge recorded when the application's stop returned] status of S-1")
        .isEqualTo(DedupStatus.SUCCESS);
    assertThat(stillInterrupted.get()).as("the stopping thread's interrupt, kept").isTrue();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.groupShareFactory(TOPIC);
    }

    @Bean
    Listener listener() {
      return new Listener();
    }
  }

  static class Listener {
    @Idempotent(bizType = TOPIC, header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void charge(ConsumerRecord<String, String> record) throws InterruptedException {
      started.countDown();
      try {
        Thread.sleep(HANDLER.toMillis());
      } finally {
        endedNanos.set(System.nanoTime());
      }
    }
  }
}
