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
 * The JVM cannot start the thread of a share listener's keeper (an {@code OutOfMemoryError}: unable
 * to create native thread, the process at its thread limit): the keeper's worker thread, started
 * just before, was left running with nobody to stop it, after the container stopped on the Error
 * and through any restart of it, one more thread where threads ran short. A package-private hook
 * makes the keeper threads, here threads that cannot start. Spring Boot 4.0 refuses share
 * listeners, so the boot40 module leaves this class out.
 */
@SpringBootTest(classes = ShareListenerKeeperStartFailureTest.App.class)
@DirtiesContext
class ShareListenerKeeperStartFailureTest {
  static final String TOPIC = "share-keeper-start-failure";
  static final Duration WAIT = Duration.ofSeconds(60);

  static final CountDownLatch refused = new CountDownLatch(1);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    ShareListenerTests.prepare(
        registry, "spring_share_keeper_start_failure", 4, TOPIC, TOPIC + "-dlt");
    TestShareGroups.configure(TOPIC, Duration.ofSeconds(15));
  }

  @Autowired KafkaListenerEndpointRegistry registry;

  /** The user sees no thread of the listener left running by a keeper that could not start. */
  @Test
  void aKeeperWhoseThreadCannotStartLeavesNoWorkerThread() throws Exception {
    DedupShareListener<?, ?> listener =
        (DedupShareListener<?, ?>)
            registry.getListenerContainer(TOPIC).getContainerProperties().getMessageListener();
    listener.keeperThreads =
        (task, name) ->
            new Thread(task, name) {
              @Override
              public synchronized void start() {
                refused.countDown();
                throw new OutOfMemoryError(
                    "unable to create native thread: possibly out of memory or process/resource"
                        + " limits reached");
              }
            };

    try (KafkaProducer<String, String> producer = TestKafka.producer()) {
      ProducerRecord<String, String> record = new ProducerRecord<>(TOPIC, "charge 4.00");
      record.headers().add("order-no", "K-1".getBytes(StandardCharsets.UTF_8));
      producer.send(record).get();
    }
    assertThat(refused.await(WAIT.toSeconds(), TimeUnit.SECONDS))
        .as("a keeper's thread was refused")
        .isTrue();

    await()
        .atMost(Duration.ofSeconds(10))
        .untilAsserted(
            () ->
                assertThat(workerThreads(TOPIC))
                    .as("worker threads of the listener alive, though no keeper could start")
                    .isEmpty());
  }

  private static List<String> workerThreads(String listenerId) {
    return Thread.getAllStackTraces().keySet().stream()
        .filter(Thread::isAlive)
        .map(Thread::getName)
        .filter(
            name -> name.startsWith("dedup-share-" + listenerId + "-") && name.endsWith("-worker"))
        .toList();
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
    @Idempotent(bizType = "keeper-start", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void charge(ConsumerRecord<String, String> record) {}
  }
}
