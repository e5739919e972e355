package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.BatchListenerFailedException;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A batch listener reports the record it failed at inside an exception of the application's that
 * cannot describe itself (its {@code getMessage()} prints an entity loaded lazily), with an error
 * handler that delivers a record twice: only that record is dead-lettered, the one after it is
 * applied.
 */
@SpringBootTest(
    classes = UnprintableBatchReportTest.App.class,
    // Two rounds of the error handler's two deliveries: the report reaches its recoverer at the end
    // of the first, and the record's attempts are spent, and it is dead-lettered, at the end of the
    // second; the default ten took five rounds and a hold back-off growing to 8 s.
    properties = "consumer-dedup.max-attempts=4")
@DirtiesContext
class UnprintableBatchReportTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String TOPIC = "unprintable-batch-report";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_unprintable_report", TOPIC, TOPIC + "-dlt");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired KafkaListenerEndpointRegistry registry;

  /**
   * Describing the report threw, and the error handler got that exception instead, naming no
   * record: it retried the whole batch, then gave every record of it to its recoverer, the one
   * after the failed record dead-lettered without the listener ever being given it.
   */
  @Test
  void onlyTheReportedRecordIsDeadLetteredAndTheOneAfterItApplied() throws Exception {
    MessageListenerContainer container = registry.getListenerContainer(TOPIC);
    container.stop();
    send(template, TOPIC, "always failing", "order-no", "U-FAIL");
    send(template, TOPIC, "charge 2", "order-no", "U-AFTER");
    container.start();

    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(TOPIC, TOPIC, 0) == 2);
    // Committed past both records, so every dead letter of theirs is written: read those at once.
    assertThat(SpringTestEnvironment.readWritten(TOPIC + "-dlt", "read_uncommitted"))
        .as("dead letters")
        .extracting(record -> header(record, "order-no"))
        .containsExactly("U-FAIL");
    assertThat(SpringTestEnvironment.effects(jdbc, TOPIC, "U-AFTER"))
        .as("the record after the failed one, applied")
        .isEqualTo(1);
  }

  /** The application's report of a failed order, which prints the order, loaded lazily. */
  static final class OrderFailure extends RuntimeException {
    private static final long serialVersionUID = 1L;

    OrderFailure(BatchListenerFailedException report) {
      super(report);
    }

    @Override
    public String getMessage() {
      throw new UnsupportedOperationException(
          "could not initialize proxy - no persistence context");
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    /** Two deliveries, then the dead-letter topic. */
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      return SpringTestEnvironment.deadLettering(template, 100, 1);
    }

    @Bean
    Orders orders(JdbcTemplate jdbc) {
      return new Orders(jdbc);
    }
  }

  static class Orders {
    private final JdbcTemplate jdbc;

    Orders(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "unprintable-report", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, batch = "true")
    public void charge(List<ConsumerRecord<String, String>> records) {
      for (int i = 0; i < records.size(); i++) {
        ConsumerRecord<String, String> record = records.get(i);
        String key = header(record, "order-no");
        if (key.equals("U-FAIL")) {
          throw new OrderFailure(
              new BatchListenerFailedException("failed", new IllegalStateException("declined"), i));
        }
        SpringTestEnvironment.effect(jdbc, TOPIC, key, record.value());
      }
    }
  }
}
