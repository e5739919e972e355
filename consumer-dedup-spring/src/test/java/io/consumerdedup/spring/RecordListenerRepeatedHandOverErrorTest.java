package io.consumerdedup.spring;

import static io.consumerdedup.spring.RepeatedHandOverErrors.MAX_ATTEMPTS;
import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.testing.HandOverErrors;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
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
@SpringBootTest(classes = RecordListenerRepeatedHandOverErrorTest.App.class)
@DirtiesContext
class RecordListenerRepeatedHandOverErrorTest {
  static final String APPLIED = "rhe-applied";
  static final String DECLINED = "rhe-declined";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    RepeatedHandOverErrors.prepare(registry, "spring_repeated_handover", APPLIED, DECLINED);
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
    AtomicInteger struck =
        HandOverErrors.strikeWhen(
            () -> calls.get() > 0 && Thread.currentThread().getName().startsWith(topic));
    send(template, topic, "payload of " + orderNo, "order-no", orderNo);

    RepeatedHandOverErrors.Runs runs =
        RepeatedHandOverErrors.restartUntilDeadLettered(
            containers.getListenerContainer(topic), topic, 1, 2 * MAX_ATTEMPTS + 2);

    assertThat(struck).as("hand-overs of an outcome that met the Error").hasPositiveValue();
    assertThat(runs.stops()).as("container stops on the Error").isPositive();
    assertThat(calls).as("listener calls").hasValueLessThanOrEqualTo(MAX_ATTEMPTS);
    assertThat(runs.deadLettered())
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
  @Import(RepeatedHandOverErrors.DeadLettering.class)
  static class App {
    @Bean
    Listener listener() {
      return new Listener();
    }
  }
}
