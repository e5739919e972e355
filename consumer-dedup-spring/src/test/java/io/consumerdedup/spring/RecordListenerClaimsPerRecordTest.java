package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.testing.TestKafka;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.ConcurrentKafkaListenerContainerFactoryConfigurer;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.ContainerProperties.AckMode;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * {@code consumer-dedup.claims-per-poll=false}: the path before claims per poll, a claim statement
 * and a SUCCESS statement per record applied (a duplicate is one read), the consumers of the
 * container factory left unwrapped. Ack modes COUNT and TIME, whose acknowledgments wait in the
 * container, commit them as partitions are revoked and as the container stops.
 */
@SpringBootTest(
    classes = RecordListenerClaimsPerRecordTest.App.class,
    properties = "consumer-dedup.claims-per-poll=false")
@DirtiesContext
class RecordListenerClaimsPerRecordTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String TOPIC = "pr-orders";
  static final String ACK_REBALANCE = "pr-ackreb-";
  static final List<AckMode> RARE_COMMITS = List.of(AckMode.COUNT, AckMode.TIME);
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "per_record", TOPIC);
    for (AckMode mode : RARE_COMMITS) {
      TestKafka.createTopics(2, ACK_REBALANCE + mode);
    }
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired StatementCounter statements;
  @Autowired KafkaListenerEndpointRegistry containers;
  @Autowired ConsumerFactory<Object, Object> consumerFactory;
  @Autowired MeterRegistry registry;

  @Test
  void eachRecordIsClaimedAndMarkedOnItsOwn() throws Exception {
    assertThat(((DefaultKafkaConsumerFactory<Object, Object>) consumerFactory).getPostProcessors())
        .doesNotContain(DedupConsumerPostProcessor.INSTANCE);
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    container.pause();
    await().atMost(WAIT).until(container::isContainerPaused);
    StatementCounter.Counts before = statements.now();
    for (int i = 0; i < 20; i++) {
      send("P-" + i);
      if (i % 2 == 0) {
        send("P-" + i); // a copy: a duplicate
      }
    }
    container.resume();
    await().atMost(WAIT).until(() -> effects.size() == 20);
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> {
              // A claim statement per new key (a duplicate is one read), and a SUCCESS statement
              // per record applied.
              StatementCounter.Counts used = statements.now().since(before);
              assertThat(used.claims()).isEqualTo(20);
              assertThat(used.marks()).isEqualTo(20);
            });
    effects.forEach((key, count) -> assertThat(count.get()).as(key).isEqualTo(1));
    assertThat(statements.now().since(before).releases()).isZero();
  }

  /**
   * COUNT and TIME containers (committing only after 1000 records or a minute) apply records of two
   * partitions; a second consumer joins the group: as the partitions are revoked, the container
   * commits the acknowledgments it holds, and the new owners read none of those records again. Then
   * both containers are stopped with acknowledgments held, and commit them.
   */
  @Test
  void countAndTimeAckModesCommitWhatTheyHoldAtARebalanceAndAStop() throws Exception {
    Map<AckMode, Double> duplicatesBefore = new EnumMap<>(AckMode.class);
    for (AckMode mode : RARE_COMMITS) {
      MessageListenerContainer a = containers.getListenerContainer(ACK_REBALANCE + mode + "-a");
      await().atMost(WAIT).until(() -> a.getAssignedPartitions().size() == 2);
      duplicatesBefore.put(mode, duplicates(mode));
      sendToBothPartitions(mode, 0, 10);
    }
    for (AckMode mode : RARE_COMMITS) {
      await().atMost(WAIT).until(() -> applied(mode) == 20);
      containers.getListenerContainer(ACK_REBALANCE + mode + "-b").start();
    }
    for (AckMode mode : RARE_COMMITS) {
      MessageListenerContainer b = containers.getListenerContainer(ACK_REBALANCE + mode + "-b");
      await().atMost(WAIT).until(() -> !b.getAssignedPartitions().isEmpty());
      for (int partition = 0; partition < 2; partition++) {
        assertThat(committed(mode, partition))
            .as("%s: committed offset of partition %d, revoked", mode, partition)
            .isEqualTo(10);
      }
      sendToBothPartitions(mode, 10, 15); // to the new owners, whose containers hold the acks
    }
    for (AckMode mode : RARE_COMMITS) {
      await().atMost(WAIT).until(() -> applied(mode) == 30);
      containers.getListenerContainer(ACK_REBALANCE + mode + "-b").stop();
      containers.getListenerContainer(ACK_REBALANCE + mode + "-a").stop();
    }
    for (AckMode mode : RARE_COMMITS) {
      for (int partition = 0; partition < 2; partition++) {
        assertThat(committed(mode, partition))
            .as("%s: committed offset of partition %d, the containers stopped", mode, partition)
            .isEqualTo(15);
      }
      assertThat(duplicates(mode) - duplicatesBefore.get(mode))
          .as("%s: records read again by a new owner", mode)
          .isZero();
    }
    effects.forEach((key, count) -> assertThat(count.get()).as(key).isEqualTo(1));
  }

  private void sendToBothPartitions(AckMode mode, int from, int to) throws Exception {
    for (int partition = 0; partition < 2; partition++) {
      for (int i = from; i < to; i++) {
        String orderNo = mode + "-P" + partition + "-" + i;
        ProducerRecord<String, String> record =
            new ProducerRecord<>(ACK_REBALANCE + mode, partition, null, "payload of " + orderNo);
        record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
        template.send(record).get();
      }
    }
  }

  private static long applied(AckMode mode) {
    return effects.keySet().stream().filter(key -> key.startsWith(mode + "-P")).count();
  }

  private double duplicates(AckMode mode) {
    return SpringTestEnvironment.outcomes(registry, ACK_REBALANCE + mode, "duplicate");
  }

  private static long committed(AckMode mode, int partition) throws Exception {
    return SpringTestEnvironment.committed(ACK_REBALANCE + mode, ACK_REBALANCE + mode, partition);
  }

  private void send(String orderNo) throws Exception {
    SpringTestEnvironment.send(template, TOPIC, "payload of " + orderNo, "order-no", orderNo);
  }

  static class Orders {
    @Idempotent(bizType = "per-record", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    void apply(String payload, @Header("order-no") String orderNo) {
      effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
    }
  }

  /** A COUNT and a TIME listener, each with a second consumer of its group that starts later. */
  static class RareCommitListeners {
    @Idempotent(bizType = ACK_REBALANCE + "COUNT", header = "order-no")
    @KafkaListener(
        id = ACK_REBALANCE + "COUNT-a",
        groupId = ACK_REBALANCE + "COUNT",
        topics = ACK_REBALANCE + "COUNT",
        containerFactory = "rareCOUNT")
    void countA(String payload, @Header("order-no") String orderNo) {
      effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
    }

    @Idempotent(bizType = ACK_REBALANCE + "COUNT", header = "order-no")
    @KafkaListener(
        id = ACK_REBALANCE + "COUNT-b",
        groupId = ACK_REBALANCE + "COUNT",
        topics = ACK_REBALANCE + "COUNT",
        containerFactory = "rareCOUNT",
        autoStartup = "false")
    void countB(String payload, @Header("order-no") String orderNo) {
      effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
    }

    @Idempotent(bizType = ACK_REBALANCE + "TIME", header = "order-no")
    @KafkaListener(
        id = ACK_REBALANCE + "TIME-a",
        groupId = ACK_REBALANCE + "TIME",
        topics = ACK_REBALANCE + "TIME",
        containerFactory = "rareTIME")
    void timeA(String payload, @Header("order-no") String orderNo) {
      effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
    }

    @Idempotent(bizType = ACK_REBALANCE + "TIME", header = "order-no")
    @KafkaListener(
        id = ACK_REBALANCE + "TIME-b",
        groupId = ACK_REBALANCE + "TIME",
        topics = ACK_REBALANCE + "TIME",
        containerFactory = "rareTIME",
        autoStartup = "false")
    void timeB(String payload, @Header("order-no") String orderNo) {
      effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean(destroyMethod = "close")
    StatementCounter dataSource(@Value("${spring.datasource.url}") String url) {
      return StatementCounter.pool(url);
    }

    @Bean
    Orders orders() {
      return new Orders();
    }

    @Bean
    SimpleMeterRegistry meterRegistry() {
      return new SimpleMeterRegistry();
    }

    @Bean
    RareCommitListeners rareCommitListeners() {
      return new RareCommitListeners();
    }

    @Bean
    RecordListenerPollClaimsTest.RareCommitFactory rareCOUNT(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      return new RecordListenerPollClaimsTest.RareCommitFactory(
          configurer, consumerFactory, AckMode.COUNT);
    }

    @Bean
    RecordListenerPollClaimsTest.RareCommitFactory rareTIME(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      return new RecordListenerPollClaimsTest.RareCommitFactory(
          configurer, consumerFactory, AckMode.TIME);
    }
  }
}
