package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.committed;
import static io.consumerdedup.spring.SpringTestEnvironment.effect;
import static io.consumerdedup.spring.SpringTestEnvironment.effects;
import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStore;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.ConcurrentKafkaListenerContainerFactoryConfigurer;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.ContainerProperties.AckMode;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.kafka.support.KafkaHeaders;
import org.springframework.kafka.test.utils.ContainerTestUtils;
import org.springframework.messaging.Message;
import org.springframework.messaging.MessageHeaders;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * Ack mode {@code MANUAL_IMMEDIATE}, claims per poll at their default: an {@code @Idempotent} batch
 * listener that reaches the container's consumer (through the {@code KafkaHeaders.CONSUMER} header
 * of its messages, or a {@code Consumer} argument) applies the first three records of a batch of
 * six, then nacks at the fourth. spring-kafka's nack commits the records before the nacked one
 * through that consumer, whose commits were held for the listener's call and dropped with its own:
 * the three records, done and SUCCESS, stayed uncommitted through the nack's sleep, and came again
 * after a restart; with async commits spring-kafka logged "Commit failed". A real PostgreSQL and
 * the in-JVM broker.
 */
@SpringBootTest(classes = BatchNackImmediateCommitTest.App.class)
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class BatchNackImmediateCommitTest {
  static final Duration WAIT = Duration.ofSeconds(30);

  /** Long enough to look at the group's offset, and to stop the container, before it ends. */
  static final Duration NACK_SLEEP = Duration.ofSeconds(20);

  static final int NACKED_AT = 3;
  static final int BATCH = 6;
  static final String MESSAGES = "bnackimm-messages";
  static final String ASYNC = "bnackimm-async";

  /** The keys of each batch the method got, per listener. */
  static final Map<String, List<List<String>>> batches = new ConcurrentHashMap<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "batch_nack_immediate", MESSAGES, ASYNC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void theRecordsBeforeABatchNackAreCommittedDuringItsSleepAndNotDeliveredAgainAfterARestart()
      throws Exception {
    nackedBatchIsCommittedUpToTheNackedRecord(MESSAGES);
  }

  @Test
  void withAsyncCommitsTheRecordsBeforeABatchNackAreCommittedAndNoCommitFailureIsLogged(
      CapturedOutput output) throws Exception {
    nackedBatchIsCommittedUpToTheNackedRecord(ASYNC);

    assertThat(output.getAll().lines().filter(line -> line.contains("Commit failed")))
        .as("lines logged of a failed commit")
        .isEmpty();
  }

  /**
   * A batch of six on {@code topic}, nacked at the fourth record by the first call: the group's
   * offset reaches the nacked record during the nack's sleep, and stays there when the container
   * stops before the redelivery; started again, the container delivers from the nacked record on,
   * and every record is applied once.
   */
  private void nackedBatchIsCommittedUpToTheNackedRecord(String topic) throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(topic);
    ContainerTestUtils.waitForAssignment(container, 1);
    // Stopped while the batch is sent, so that it arrives in one poll.
    container.stop();
    List<String> keys = new ArrayList<>();
    for (int i = 0; i < BATCH; i++) {
      keys.add(topic + "-" + i);
      send(template, topic, "credit " + i, "order-no", keys.get(i));
    }
    container.start();

    await().atMost(WAIT).until(() -> !batchesOf(topic).isEmpty());
    assertThat(batchesOf(topic).get(0)).as("the first batch").isEqualTo(keys);
    await()
        .atMost(NACK_SLEEP.dividedBy(2))
        .untilAsserted(
            () ->
                assertThat(committed(topic, topic, 0))
                    .as(
                        "the group's committed offset during the nack's sleep, the records before"
                            + " the nacked one done (keys %s)",
                        statuses(topic, keys.subList(0, NACKED_AT)))
                    .isEqualTo(NACKED_AT));
    assertThat(batchesOf(topic)).as("batches, the nacked one not delivered again yet").hasSize(1);

    container.stop();
    assertThat(committed(topic, topic, 0))
        .as("the group's committed offset once the container stopped during the nack's sleep")
        .isEqualTo(NACKED_AT);

    container.start();
    await().atMost(WAIT).until(() -> committed(topic, topic, 0) == BATCH);
    for (String key : keys) {
      assertThat(effects(jdbc, topic, key)).as("effects of %s", key).isEqualTo(1);
    }
    assertThat(batchesOf(topic))
        .as("batches: the nacked one, then from the nacked record on after the restart")
        .containsExactly(keys, keys.subList(NACKED_AT, BATCH));
  }

  /** Each key of {@code bizType} with its status. */
  private List<String> statuses(String bizType, List<String> keys) {
    return keys.stream()
        .map(
            key ->
                key
                    + "="
                    + store.find(DedupKey.of(bizType, key)).map(DedupRecord::status).orElse(null))
        .toList();
  }

  private static List<List<String>> batchesOf(String topic) {
    return batches.getOrDefault(topic, List.of());
  }

  static class Listeners {
    final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = MESSAGES, header = "order-no")
    @KafkaListener(
        id = MESSAGES,
        topics = MESSAGES,
        batch = "true",
        containerFactory = "immediateFactory")
    public void onMessages(List<Message<String>> messages) {
      List<String> keys = messages.stream().map(m -> orderNo(m.getHeaders())).toList();
      List<String> values = messages.stream().map(Message::getPayload).toList();
      Acknowledgment ack =
          (Acknowledgment)
              Objects.requireNonNull(
                  messages.get(0).getHeaders().get(KafkaHeaders.ACKNOWLEDGMENT), "acknowledgment");
      applyOrNackTheFirstBatch(MESSAGES, keys, values, ack);
    }

    /** The consumer is taken, not used: with it, the container's consumer reaches the method. */
    @Idempotent(bizType = ASYNC, header = "order-no")
    @KafkaListener(id = ASYNC, topics = ASYNC, batch = "true", containerFactory = "asyncFactory")
    public void onRecords(
        List<ConsumerRecord<String, String>> records, Acknowledgment ack, Consumer<?, ?> consumer) {
      applyOrNackTheFirstBatch(
          ASYNC,
          records.stream().map(r -> header(r, "order-no")).toList(),
          records.stream().map(ConsumerRecord::value).toList(),
          ack);
    }

    /**
     * The first call applies the records before {@link #NACKED_AT} and nacks there; later calls
     * apply their records and acknowledge them.
     */
    private void applyOrNackTheFirstBatch(
        String listener, List<String> keys, List<String> values, Acknowledgment ack) {
      boolean first =
          batches.computeIfAbsent(listener, l -> new CopyOnWriteArrayList<>()).isEmpty();
      batches.get(listener).add(keys);
      int end = first ? NACKED_AT : keys.size();
      for (int i = 0; i < end; i++) {
        effect(jdbc, listener, keys.get(i), values.get(i));
      }
      if (first) {
        ack.nack(NACKED_AT, NACK_SLEEP);
      } else {
        ack.acknowledge();
      }
    }

    private static String orderNo(MessageHeaders headers) {
      Object value = headers.get("order-no");
      return value instanceof byte[] bytes
          ? new String(bytes, StandardCharsets.UTF_8)
          : String.valueOf(value);
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }

    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> immediateFactory(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      return immediate(configurer, consumerFactory, true);
    }

    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> asyncFactory(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      return immediate(configurer, consumerFactory, false);
    }

    private static ConcurrentKafkaListenerContainerFactory<Object, Object> immediate(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        boolean syncCommits) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setAckMode(AckMode.MANUAL_IMMEDIATE);
      factory.getContainerProperties().setSyncCommits(syncCommits);
      return factory;
    }
  }
}
