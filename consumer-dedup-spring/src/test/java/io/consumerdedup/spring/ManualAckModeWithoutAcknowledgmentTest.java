package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.committed;
import static io.consumerdedup.spring.SpringTestEnvironment.effect;
import static io.consumerdedup.spring.SpringTestEnvironment.effects;
import static io.consumerdedup.spring.SpringTestEnvironment.outcomes;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
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
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.kafka.support.KafkaHeaders;
import org.springframework.messaging.Message;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A newcomer sets {@code spring.kafka.listener.ack-mode=manual} and keeps the quick start's
 * listener, which takes no {@code Acknowledgment}: spring-kafka commits no offset of its records,
 * and says nothing. The records are applied once all the same, and each start of the container
 * delivers them all again, as duplicates; but the lag only grows, and nothing told the newcomer
 * why. Now the first record of such a listener logs one WARN naming the listener and what to do. A
 * real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = ManualAckModeWithoutAcknowledgmentTest.App.class)
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class ManualAckModeWithoutAcknowledgmentTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String TOPIC = "manack-payments";
  static final String GROUP = "manack-billing";
  static final String REFUNDS = "manack-refunds";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "manual_ack", TOPIC, REFUNDS);
    registry.add("spring.kafka.listener.ack-mode", () -> "manual");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired KafkaListenerEndpointRegistry containers;
  @Autowired MeterRegistry meters;

  @Test
  void aListenerThatCannotAcknowledgeInManualAckModeIsNamedOnceWithWhatToDo(CapturedOutput output)
      throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    for (int i = 1; i <= 3; i++) {
      SpringTestEnvironment.send(template, TOPIC, "10.00", "order-no", "M-" + i);
    }
    await().atMost(WAIT).until(() -> effects(jdbc, TOPIC, "M-3") == 1);
    assertThat(committed(GROUP, TOPIC, 0)).as("offset committed by spring-kafka").isEqualTo(-1);

    assertThat(
            output
                .getAll()
                .lines()
                .filter(line -> line.contains(" WARN ") && line.contains("Payments#charge")))
        .as("WARN lines naming the listener")
        .singleElement()
        .satisfies(
            line ->
                assertThat(line)
                    .contains("ack mode MANUAL")
                    .contains("takes no Acknowledgment")
                    .contains("commits no offset")
                    .contains("spring.kafka.listener.ack-mode"));

    // Nothing applied twice: started again, the container gets the records again, as duplicates.
    container.stop();
    container.start();
    await().atMost(WAIT).until(() -> outcomes(meters, "manack", "duplicate") == 3);
    for (int i = 1; i <= 3; i++) {
      assertThat(effects(jdbc, TOPIC, "M-" + i)).as("M-" + i).isEqualTo(1);
    }
  }

  @Test
  void aListenerThatAcknowledgesThroughItsMessageIsNotWarnedOf(CapturedOutput output)
      throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(REFUNDS);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    SpringTestEnvironment.send(template, REFUNDS, "5.00", "order-no", "R-1");

    await().atMost(WAIT).until(() -> committed(REFUNDS, REFUNDS, 0) == 1);
    assertThat(effects(jdbc, REFUNDS, "R-1")).as("R-1 applied").isEqualTo(1);
    assertThat(output.getAll().lines().filter(line -> line.contains("Refunds#refund")))
        .as("lines naming the listener, which acknowledges through its message's header")
        .noneMatch(line -> line.contains("takes no Acknowledgment"));
  }

  /** Acknowledges through the Acknowledgment its message carries in a header. */
  static class Refunds {
    final JdbcTemplate jdbc;

    Refunds(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "manack-refund", header = "order-no")
    @KafkaListener(id = REFUNDS, topics = REFUNDS, groupId = REFUNDS)
    public void refund(Message<String> message) {
      Object header = message.getHeaders().get("order-no");
      String orderNo =
          header instanceof byte[] bytes
              ? new String(bytes, StandardCharsets.UTF_8)
              : String.valueOf(header);
      effect(jdbc, REFUNDS, orderNo, message.getPayload());
      message.getHeaders().get(KafkaHeaders.ACKNOWLEDGMENT, Acknowledgment.class).acknowledge();
    }
  }

  static class Payments {
    final JdbcTemplate jdbc;

    Payments(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "manack", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = GROUP)
    public void charge(String amount, @Header("order-no") String orderNo) {
      effect(jdbc, TOPIC, orderNo, amount);
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    SimpleMeterRegistry meterRegistry() {
      return new SimpleMeterRegistry();
    }

    @Bean
    Payments payments(JdbcTemplate jdbc) {
      return new Payments(jdbc);
    }

    @Bean
    Refunds refunds(JdbcTemplate jdbc) {
      return new Refunds(jdbc);
    }
  }
}
