package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.DefaultKafkaConsumerFactoryCustomizer;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * Claims per poll: a container stopped while its consumer commits, from within a poll, offsets
 * whose SUCCESS marks were written after the container's own commit, stops at once. The container
 * ends a poll by waking the consumer; before, that commit swallowed the wakeup and the poll went on
 * for the rest of its timeout (12 s here, longer than the stop waits), so the stop waited out its
 * own timeout and the consumer thread lived on. A real PostgreSQL (a trigger refuses the SUCCESS
 * mark until the test lets it through, so the commit is owed) and the in-JVM broker; the consumer's
 * commit waits until the container's stop has woken it, so the wakeup lands in that commit every
 * time.
 */
@SpringBootTest(classes = RecordListenerStopDuringOwedCommitTest.App.class)
@DirtiesContext
class RecordListenerStopDuringOwedCommitTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String TOPIC = "sdo-orders";
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();

  /** Set once the owed commit may come: the next commit of offsets alone waits for the wakeup. */
  static final AtomicBoolean armed = new AtomicBoolean();

  static final CountDownLatch committing = new CountDownLatch(1);
  static final CountDownLatch woken = new CountDownLatch(1);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    String schema = SpringTestEnvironment.prepare(registry, "stop_owed", TOPIC);
    SpringTestEnvironment.refuseListedSuccesses(schema);
    registry.add("consumer-dedup.store.retry-max-attempts", () -> "1");
    registry.add("spring.kafka.listener.poll-timeout", () -> "12s");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void aStopThatLandsInTheCommitOfOwedOffsetsEndsThePollAtOnce() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    jdbc.update("INSERT INTO mark_faults (biz_key) VALUES ('S-1')");
    ProducerRecord<String, String> record = new ProducerRecord<>(TOPIC, "payload of S-1");
    record.headers().add("order-no", "S-1".getBytes(StandardCharsets.UTF_8));
    template.send(record).get();
    // Its SUCCESS is refused: the container's commit stops before it, and the offset is owed.
    await().atMost(WAIT).until(() -> applied("S-1") == 1 && faultHits() > 0);
    assertThat(committed()).isZero();

    armed.set(true);
    jdbc.update("DELETE FROM mark_faults");
    assertThat(committing.await(WAIT.toSeconds(), TimeUnit.SECONDS))
        .as("the owed offset is committed from within a poll")
        .isTrue();

    long start = System.nanoTime();
    container.stop();
    Duration stopped = Duration.ofNanos(System.nanoTime() - start);

    assertThat(stopped)
        .as("time stop() took (poll timeout 12 s, stop timeout 10 s)")
        .isLessThan(Duration.ofSeconds(5));
    assertThat(status("S-1")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(committed()).as("committed when the consumer closed").isEqualTo(1);
    assertThat(applied("S-1")).isEqualTo(1);
  }

  private static int applied(String orderNo) {
    AtomicInteger count = effects.get(orderNo);
    return count == null ? 0 : count.get();
  }

  private DedupStatus status(String orderNo) {
    return store.find(DedupKey.of("sdo", orderNo)).map(DedupRecord::status).orElse(null);
  }

  private long faultHits() {
    return SpringTestEnvironment.refusedSuccesses(jdbc);
  }

  private static long committed() throws Exception {
    return SpringTestEnvironment.committed(TOPIC, TOPIC, 0);
  }

  /**
   * {@code consumer}, whose first commit of offsets alone (as only consumer-dedup's owed commit
   * calls it) once {@link #armed} waits until the consumer has been woken.
   */
  @SuppressWarnings("unchecked")
  static Consumer<Object, Object> wakeupInOwedCommit(Consumer<Object, Object> consumer) {
    return (Consumer<Object, Object>)
        Proxy.newProxyInstance(
            Consumer.class.getClassLoader(),
            new Class<?>[] {Consumer.class},
            (proxy, method, args) -> {
              if (method.getName().equals("commitSync")
                  && args != null
                  && args.length == 1
                  && armed.compareAndSet(true, false)) {
                committing.countDown();
                woken.await(WAIT.toSeconds(), TimeUnit.SECONDS);
              }
              try {
                return method.invoke(consumer, args);
              } catch (InvocationTargetException e) {
                throw e.getCause();
              } finally {
                // Counted once the wakeup is set, so that the commit it lets go sees it.
                if (method.getName().equals("wakeup")) {
                  woken.countDown();
                }
              }
            });
  }

  static class Listener {
    @Idempotent(bizType = "sdo", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    void onOrder(String payload, @Header("order-no") String orderNo) {
      effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listener listener() {
      return new Listener();
    }

    /** Applied before consumer-dedup's own post-processor, which then wraps this consumer. */
    @Bean
    @SuppressWarnings("unchecked")
    DefaultKafkaConsumerFactoryCustomizer wakeupInOwedCommitCustomizer() {
      return factory ->
          ((DefaultKafkaConsumerFactory<Object, Object>) factory)
              .addPostProcessor(RecordListenerStopDuringOwedCommitTest::wakeupInOwedCommit);
    }
  }
}
