package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.testing.TestShareGroups;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An application whose context is stopped and started again ({@code ConfigurableApplicationContext}
 * {@code stop()} and {@code start()}, as a pause of its consumers does): its {@code @Idempotent}
 * share listener must be protected again afterwards, not left with the stopped worker. Spring Boot
 * 4.0 refuses share listeners, so the boot40 module leaves this class out.
 */
@SpringBootTest(classes = ShareListenerRestartTest.App.class)
@DirtiesContext
class ShareListenerRestartTest {
  static final String TOPIC = "share-restart";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_restart", TOPIC, TOPIC + "-dlt");
    TestShareGroups.configure(
        TOPIC, Duration.ofSeconds(3), Duration.ofSeconds(1)); // joins in a second
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired ConfigurableApplicationContext context;

  /**
   * The user sees a record sent after the restart applied once, and a copy of a record applied
   * before the restart not applied again; nothing is left in the queue.
   */
  @Test
  void aListenerStoppedAndStartedWithItsApplicationAppliesEachRecordOnceAfterwards()
      throws Exception {
    send(template, TOPIC, "charge 1.00", "order-no", "R-1");
    await().atMost(ShareListenerIntegrationTest.WAIT).until(() -> effectsOf("R-1") == 1);

    context.stop();
    context.start();
    send(template, TOPIC, "charge 2.00", "order-no", "R-2");
    send(template, TOPIC, "charge 1.00", "order-no", "R-1");

    await().atMost(ShareListenerIntegrationTest.WAIT).until(() -> effectsOf("R-2") == 1);
    assertThat(TestShareGroups.remaining(TOPIC, TOPIC, Duration.ofSeconds(5))).isEmpty();
    assertThat(effectsOf("R-1")).as("the copy of R-1 sent after the restart").isEqualTo(1);
    assertThat(effectsOf("R-2")).isEqualTo(1);
  }

  /**
   * The same, the application stopped from a thread already interrupted (a shutdown begun from an
   * interrupted thread): the user sees a record sent after the restart applied once, and the
   * stopping thread still interrupted afterwards, as it was.
   */
  @Test
  void aListenerStoppedOnAnInterruptedThreadIsProtectedAgainAfterTheRestart() throws Exception {
    send(template, TOPIC, "charge 3.00", "order-no", "I-3");
    await().atMost(ShareListenerIntegrationTest.WAIT).until(() -> effectsOf("I-3") == 1);

    AtomicBoolean interruptedAfterwards = new AtomicBoolean();
    Thread stopping =
        new Thread(
            () -> {
              Thread.currentThread().interrupt();
              context.stop();
              interruptedAfterwards.set(Thread.interrupted());
            },
            "stopping " + TOPIC);
    stopping.start();
    stopping.join(ShareListenerIntegrationTest.WAIT.toMillis());
    assertThat(interruptedAfterwards.get()).as("the stopping thread's interrupt, kept").isTrue();
    context.start();
    send(template, TOPIC, "charge 4.00", "order-no", "I-4");

    await().atMost(Duration.ofSeconds(20)).until(() -> effectsOf("I-4") == 1);
    assertThat(TestShareGroups.remaining(TOPIC, TOPIC, Duration.ofSeconds(5))).isEmpty();
    assertThat(effectsOf("I-4")).isEqualTo(1);
  }

  private int effectsOf(String orderNo) {
    return SpringTestEnvironment.effects(jdbc, TOPIC, orderNo);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.stringShareFactory();
    }

    @Bean
    Listener listener(JdbcTemplate jdbc) {
      return new Listener(jdbc);
    }
  }

  static class Listener {
    private final JdbcTemplate jdbc;

    Listener(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "restart", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void charge(ConsumerRecord<String, String> record) {
      jdbc.update(
          "INSERT INTO effects (listener, biz_key, payload) VALUES (?, ?, ?)",
          TOPIC,
          header(record, "order-no"),
          record.value());
    }
  }
}
