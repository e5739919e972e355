package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.committed;
import static io.consumerdedup.spring.SpringTestEnvironment.effect;
import static io.consumerdedup.spring.SpringTestEnvironment.effects;
import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
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
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.kafka.support.KafkaHeaders;
import org.springframework.messaging.Message;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * {@code spring.kafka.listener.ack-mode=manual} over an {@code @Idempotent} batch listener that
 * takes no {@code Acknowledgment}: spring-kafka commits no offset of its batches, and says nothing,
 * as for a record listener (whose first record logs one WARN). A batch listener is named the same
 * way; one that acknowledges (an {@code Acknowledgment} argument, or through the messages it takes)
 * is not. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = BatchManualAckModeWithoutAcknowledgmentTest.App.class)
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class BatchManualAckModeWithoutAcknowledgmentTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String SILENT = "bmanack-silent";
  static final String ACKING = "bmanack-acking";
  static final String MESSAGES = "bmanack-messages";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "batch_manual_ack", SILENT, ACKING, MESSAGES);
    registry.add("spring.kafka.listener.ack-mode", () -> "manual");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void aBatchListenerThatCannotAcknowledgeInManualAckModeIsNamedOnceWithWhatToDo(
      CapturedOutput output) throws Exception {
    await().atMost(WAIT).until(() -> assigned(SILENT));
    for (int i = 1; i <= 3; i++) {
      SpringTestEnvironment.send(template, SILENT, "10.00", "order-no", "BS-" + i);
    }
    await().atMost(WAIT).until(() -> effects(jdbc, SILENT, "BS-3") == 1);
    SpringTestEnvironment.send(template, SILENT, "10.00", "order-no", "BS-4");
    await().atMost(WAIT).until(() -> effects(jdbc, SILENT, "BS-4") == 1);
    assertThat(committed(SILENT, SILENT, 0)).as("offset committed by spring-kafka").isEqualTo(-1);

    assertThat(
            output
                .getAll()
                .lines()
                .filter(line -> line.contains(" WARN ") && line.contains("Silent#charge")))
        .as("WARN lines naming the batch listener")
        .singleElement()
        .satisfies(
            line ->
                assertThat(line)
                    .contains("ack mode MANUAL")
                    .contains("takes no Acknowledgment")
                    .contains("commits no offset")
                    .contains("spring.kafka.listener.ack-mode"));
  }

  @Test
  void batchListenersThatAcknowledgeAreNotWarnedOf(CapturedOutput output) throws Exception {
    await().atMost(WAIT).until(() -> assigned(ACKING) && assigned(MESSAGES));
    SpringTestEnvironment.send(template, ACKING, "5.00", "order-no", "BA-1");
    SpringTestEnvironment.send(template, MESSAGES, "5.00", "order-no", "BM-1");

    await().atMost(WAIT).until(() -> committed(ACKING, ACKING, 0) == 1);
    await().atMost(WAIT).until(() -> committed(MESSAGES, MESSAGES, 0) == 1);
    assertThat(effects(jdbc, ACKING, "BA-1")).as("BA-1 applied").isEqualTo(1);
    assertThat(effects(jdbc, MESSAGES, "BM-1")).as("BM-1 applied").isEqualTo(1);
    assertThat(
            output
                .getAll()
                .lines()
                .filter(line -> line.contains("Acking#charge") || line.contains("Messages#charge")))
        .as("lines naming the listeners, which acknowledge")
        .noneMatch(line -> line.contains("takes no Acknowledgment"));
  }

  private boolean assigned(String id) {
    return !containers.getListenerContainer(id).getAssignedPartitions().isEmpty();
  }

  static class Silent {
    final JdbcTemplate jdbc;

    Silent(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = SILENT, header = "order-no")
    @KafkaListener(id = SILENT, topics = SILENT, batch = "true")
    public void charge(List<ConsumerRecord<String, String>> records) {
      for (ConsumerRecord<String, String> record : records) {
        effect(jdbc, SILENT, header(record, "order-no"), record.value());
      }
    }
  }

  static class Acking {
    final JdbcTemplate jdbc;

    Acking(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = ACKING, header = "order-no")
    @KafkaListener(id = ACKING, topics = ACKING, batch = "true")
    public void charge(List<ConsumerRecord<String, String>> records, Acknowledgment ack) {
      for (ConsumerRecord<String, String> record : records) {
        effect(jdbc, ACKING, header(record, "order-no"), record.value());
      }
      ack.acknowledge();
    }
  }

  /** Acknowledges through the Acknowledgment its messages carry in a header. */
  static class Messages {
    final JdbcTemplate jdbc;

    Messages(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = MESSAGES, header = "order-no")
    @KafkaListener(id = MESSAGES, topics = MESSAGES, batch = "true")
    public void charge(List<Message<String>> messages) {
      Acknowledgment ack = null;
      for (Message<String> message : messages) {
        Object header = message.getHeaders().get("order-no");
        String orderNo =
            header instanceof byte[] bytes
                ? new String(bytes, StandardCharsets.UTF_8)
                : String.valueOf(header);
        effect(jdbc, MESSAGES, orderNo, message.getPayload());
        ack = message.getHeaders().get(KafkaHeaders.ACKNOWLEDGMENT, Acknowledgment.class);
      }
      if (ack != null) {
        ack.acknowledge();
      }
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Silent silent(JdbcTemplate jdbc) {
      return new Silent(jdbc);
    }

    @Bean
    Acking acking(JdbcTemplate jdbc) {
      return new Acking(jdbc);
    }

    @Bean
    Messages messages(JdbcTemplate jdbc) {
      return new Messages(jdbc);
    }
  }
}
