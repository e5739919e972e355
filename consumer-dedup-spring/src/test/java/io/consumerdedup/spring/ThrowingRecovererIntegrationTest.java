package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.Consumer;
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
import org.springframework.kafka.listener.CommonErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.test.utils.ContainerTestUtils;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An error handler of the application that does not seek and whose recovery of a failed record
 * throws (its dead-letter topic refused the record): the failed record comes again, as spring-kafka
 * has it for such a handler of its own, and the records of the same poll after it are not lost.
 */
@SpringBootTest(classes = ThrowingRecovererIntegrationTest.App.class)
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class ThrowingRecovererIntegrationTest {
  static final Duration WAIT = Duration.ofSeconds(30);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry, "spring_throwing_recoverer", "thr-orders", "thr-refused");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired KafkaListenerEndpointRegistry containers;
  @Autowired FailsFirstRecovery recovery;

  @Test
  void aRecoveryThatThrowsLeavesTheFailedRecordAndThoseAfterItToComeAgain() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer("thr-orders");
    ContainerTestUtils.waitForAssignment(container, 1);
    container.stop();
    send(template, "thr-orders", "poison", "order-no", "P-1");
    send(template, "thr-orders", "after", "order-no", "L-2");
    send(template, "thr-orders", "after", "order-no", "L-3");
    container.start();

    for (String key : List.of("L-2", "L-3")) {
      await()
          .atMost(WAIT)
          .alias("effect of " + key + ", a record after the failed one in the same poll")
          .until(() -> SpringTestEnvironment.effects(jdbc, "recovered", key) == 1);
    }
    await().atMost(WAIT).until(() -> committed() == 3);
    assertThat(recovery.calls)
        .as("the recovery that threw, then the one that recovered the record")
        .hasValue(2);
  }

  /**
   * The same handler's recovery keeps throwing (its dead-letter topic refusing the record for a
   * while): the record waits the hold back-off between tries, the failure logged at ERROR once,
   * rather than coming again at once, its listener and recovery failing each time.
   */
  @Test
  void aRecoveryThatKeepsThrowingWaitsAGrowingBackOffLoggedOnceAtError(CapturedOutput output)
      throws Exception {
    long offset = send(template, "thr-refused", "poison", "order-no", "P-9");

    await().atMost(WAIT).until(() -> recovery.refusedTries.size() >= 3);
    List<Long> tries = recovery.refusedTries;
    assertThat(Duration.ofNanos(tries.get(2) - tries.get(1)))
        .as("wait before the third try of the recovery (tries so far: %d)", tries.size())
        .isGreaterThanOrEqualTo(Duration.ofMillis(1_500));
    assertThat(
            output
                .getAll()
                .lines()
                .filter(line -> line.contains(" ERROR ") && line.contains("thr-refused-0@0"))
                .filter(line -> line.contains("refused"))
                .toList())
        .as("ERROR lines of the failing recovery over %d tries", tries.size())
        .hasSize(1);

    recovery.refusing.set(false);
    await()
        .atMost(WAIT)
        .until(() -> SpringTestEnvironment.committed("thr-refused", "thr-refused", 0) > offset);
  }

  private long committed() throws Exception {
    return SpringTestEnvironment.committed("thr-orders", "thr-orders", 0);
  }

  /**
   * Recovers a record by returning true, except the first time, when it throws; a record of
   * thr-refused, as long as {@link #refusing}.
   */
  static class FailsFirstRecovery implements CommonErrorHandler {
    final AtomicInteger calls = new AtomicInteger();
    final AtomicBoolean refusing = new AtomicBoolean(true);
    final List<Long> refusedTries = new CopyOnWriteArrayList<>();

    @Override
    public boolean seeksAfterHandling() {
      return false;
    }

    @Override
    public boolean handleOne(
        Exception thrownException,
        ConsumerRecord<?, ?> record,
        Consumer<?, ?> consumer,
        MessageListenerContainer container) {
      if (record.topic().equals("thr-refused")) {
        refusedTries.add(System.nanoTime());
        if (refusing.get()) {
          throw new IllegalStateException("the dead-letter topic refused " + record.offset());
        }
        return true;
      }
      if (calls.incrementAndGet() == 1) {
        throw new IllegalStateException("the dead-letter topic refused " + record.offset());
      }
      return true;
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    FailsFirstRecovery errorHandler() {
      return new FailsFirstRecovery();
    }

    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }
  }

  static class Listeners {
    final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "recovered", header = "order-no")
    @KafkaListener(id = "thr-orders", topics = "thr-orders")
    public void on(ConsumerRecord<String, String> record) {
      String key = header(record, "order-no");
      if (key.startsWith("P-")) {
        throw new IllegalStateException("cannot apply " + key);
      }
      SpringTestEnvironment.effect(jdbc, "recovered", key, record.value());
    }

    @Idempotent(bizType = "refused", header = "order-no")
    @KafkaListener(id = "thr-refused", topics = "thr-refused")
    public void refused(ConsumerRecord<String, String> record) {
      throw new IllegalStateException("cannot apply " + header(record, "order-no"));
    }
  }
}
