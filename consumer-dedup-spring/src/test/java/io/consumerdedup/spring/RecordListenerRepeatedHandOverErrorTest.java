package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.internal.FaultPoints;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An {@code Error} that repeats (an application short of memory) strikes every time the outcome of
 * an {@code @Idempotent} record listener is handed over, the claim's second try too: the claim is
 * open again once the listener has run, and the container stops on the Error. The application
 * starts the container again, as after a restart. The record must not be held "in progress" for
 * good, nor run without end: its attempts are counted and it is dead-lettered once they are spent.
 * A real PostgreSQL and the in-JVM broker; {@code consumer-dedup.max-attempts=2}.
 */
@SpringBootTest(
    classes = RecordListenerRepeatedHandOverErrorTest.App.class,
    properties = "consumer-dedup.max-attempts=2")
@DirtiesContext
class RecordListenerRepeatedHandOverErrorTest {
  static final Duration WAIT = Duration.ofSeconds(20);
  static final String APPLIED = "rhe-applied";
  static final String DECLINED = "rhe-declined";
  static final int MAX_ATTEMPTS = 2;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "spring_repeated_handover",
        APPLIED,
        APPLIED + "-dlt",
        DECLINED,
        DECLINED + "-dlt");
    registry.add("consumer-dedup.lease", () -> "2s");
    registry.add("consumer-dedup.hold.initial-backoff", () -> "200ms");
    registry.add("consumer-dedup.hold.max-backoff", () -> "1s");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired KafkaListenerEndpointRegistry containers;

  @AfterEach
  void noMoreErrors() {
    FaultPoints.install(null);
  }

  @ParameterizedTest(name = "listener fails {0}")
  @ValueSource(booleans = {false, true})
  void aRecordWhoseOutcomeNeverHandsOverIsDeadLetteredOnceItsAttemptsAreSpent(boolean fails)
      throws Exception {
    String topic = fails ? DECLINED : APPLIED;
    String orderNo = "RHE-" + fails;
    AtomicInteger calls = fails ? Listener.declinedCalls : Listener.appliedCalls;
    AtomicInteger struck = new AtomicInteger();
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.ENDING
              && calls.get() > 0
              && Thread.currentThread().getName().startsWith(topic)) {
            struck.incrementAndGet();
            throw new OutOfMemoryError("Java heap space, handing the outcome over");
          }
        });
    send(template, topic, "payload of " + orderNo, "order-no", orderNo);
    MessageListenerContainer container = containers.getListenerContainer(topic);
    List<ConsumerRecord<String, String>> deadLettered = List.of();
    int stops = 0;
    // The application starts the container again whenever the Error stops it.
    for (int run = 0; run < 2 * MAX_ATTEMPTS + 2 && deadLettered.isEmpty(); run++) {
      if (!container.isRunning()) {
        container.start();
      }
      long giveUp = System.nanoTime() + WAIT.toNanos();
      while (container.isRunning() && System.nanoTime() < giveUp) {
        Thread.sleep(50);
      }
      if (!container.isRunning()) {
        stops++;
      }
      deadLettered = readTopic(topic + "-dlt", 1, Duration.ofSeconds(1));
    }
    container.stop();

    assertThat(struck).as("hand-overs of an outcome that met the Error").hasPositiveValue();
    assertThat(stops).as("container stops on the Error").isPositive();
    assertThat(calls).as("listener calls").hasValueLessThanOrEqualTo(MAX_ATTEMPTS);
    assertThat(deadLettered)
        .as("records dead-lettered")
        .extracting(record -> header(record, "order-no"))
        .containsExactly(orderNo);
  }

  static class Listener {
    static final AtomicInteger appliedCalls = new AtomicInteger();
    static final AtomicInteger declinedCalls = new AtomicInteger();

    @Idempotent(bizType = APPLIED, header = "order-no")
    @KafkaListener(id = APPLIED, topics = APPLIED, autoStartup = "false")
    void apply(String payload, @Header("order-no") String orderNo) {
      appliedCalls.incrementAndGet();
    }

    @Idempotent(bizType = DECLINED, header = "order-no")
    @KafkaListener(id = DECLINED, topics = DECLINED, autoStartup = "false")
    void decline(String payload, @Header("order-no") String orderNo) {
      declinedCalls.incrementAndGet();
      throw new IllegalStateException("declined " + orderNo);
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      return SpringTestEnvironment.deadLettering(template, 100, 3);
    }

    @Bean
    Listener listener() {
      return new Listener();
    }
  }
}
