package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.spring.ShareListenerTests;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
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
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * The application stops consumer-dedup's share listener (its stop closes the listener after the
 * containers) at the moment the listener's keeper replaces the worker that a handler's {@code
 * Error} ended. The keeper checked that it was still running before taking its lock, and the close
 * stopped the worker it saw, the dead one: the replacement was made after the close, and its thread
 * ran on, polling for records, after the application stopped. A package-private hook holds the
 * keeper between that check and its lock while the listener closes. Spring Boot 4.0 refuses share
 * listeners, so the boot40 module leaves this class out.
 */
@SpringBootTest(classes = ShareListenerCloseTest.App.class)
@DirtiesContext
class ShareListenerCloseTest {
  static final String TOPIC = "share-close";
  static final Duration WAIT = Duration.ofSeconds(60);

  static final AtomicInteger calls = new AtomicInteger();

  /** When the last handler call began ({@link System#nanoTime()}). */
  static final AtomicLong lastCallNanos = new AtomicLong();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    ShareListenerTests.prepare(registry, "spring_share_close", 4, TOPIC, TOPIC + "-dlt");
    TestShareGroups.configure(TOPIC, Duration.ofSeconds(5));
  }

  @Autowired KafkaListenerEndpointRegistry registry;
  @Autowired DedupListenerContainersConfigurer configurer;

  /**
   * The user sees no thread of the listener left once its stop returned, and no handler call begun
   * after it.
   */
  @Test
  void aListenerStoppedWhileItsKeeperReplacesAWorkerLeavesNoWorkerRunning() throws Exception {
    DedupShareListener<?, ?> listener =
        (DedupShareListener<?, ?>)
            registry.getListenerContainer(TOPIC).getContainerProperties().getMessageListener();
    CountDownLatch replacing = new CountDownLatch(1);
    CountDownLatch stopped = new CountDownLatch(1);
    listener.beforeWorkerReplaced =
        () -> {
          replacing.countDown();
          awaitIgnoringInterrupts(stopped);
        };

    try (KafkaProducer<String, String> producer = TestKafka.producer()) {
      ProducerRecord<String, String> record = new ProducerRecord<>(TOPIC, "charge 5.00");
      record.headers().add("order-no", "E-1".getBytes(StandardCharsets.UTF_8));
      producer.send(record).get();
    }
    assertThat(replacing.await(WAIT.toSeconds(), TimeUnit.SECONDS))
        .as("the keeper replaces the worker the Error ended")
        .isTrue();

    // What the application's stop does once the containers stopped; this container still runs,
    // so that nothing else stops the keeper meanwhile.
    configurer.stop();
    long stopNanos = System.nanoTime();
    stopped.countDown();

    await().atMost(Duration.ofSeconds(10)).until(() -> threads(TOPIC, "-keeper").isEmpty());
    Thread.sleep(500);
    assertThat(threads(TOPIC, "-worker"))
        .as("worker threads of the share listener alive after its stop")
        .isEmpty();
    assertThat(lastCallNanos.get() - stopNanos)
        .as("handler calls begun after the stop (calls: %s)", calls.get())
        .isNegative();
  }

  /** The live threads of the listener's keepers or workers. */
  private static List<String> threads(String listenerId, String suffix) {
    return Thread.getAllStackTraces().keySet().stream()
        .filter(Thread::isAlive)
        .map(Thread::getName)
        .filter(name -> name.startsWith("dedup-share-" + listenerId + "-") && name.endsWith(suffix))
        .toList();
  }

  private static void awaitIgnoringInterrupts(CountDownLatch latch) {
    boolean interrupted = false;
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (latch.getCount() > 0 && System.nanoTime() < deadline) {
      try {
        latch.await(deadline - System.nanoTime(), TimeUnit.NANOSECONDS);
      } catch (InterruptedException e) {
        interrupted = true; // the close interrupts the keeper: it still goes on from here
      }
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
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
    @Idempotent(bizType = "close", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void charge(ConsumerRecord<String, String> record) {
      lastCallNanos.set(System.nanoTime());
      if (calls.incrementAndGet() == 1) {
        throw new StackOverflowError("deep recursion in the handler");
      }
    }
  }
}
