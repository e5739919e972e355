package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestKafka;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.context.event.EventListener;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.event.ConsumerStoppedEvent;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An {@code Error} (an {@code OutOfMemoryError} from the store's pool, say) as consumer-dedup gives
 * back the unused claims of a poll cut short, which it does as the container's consumer thread
 * clears its state after the poll. spring-kafka calls that from a {@code finally} of its consumer
 * loop, past the {@code catch} that stops a container on an {@code Error}: before, the {@code
 * Error} ended the consumer thread there without closing the consumer, so the container still said
 * it was running, consumed nothing more, and its consumer held the partition in its group until
 * {@code max.poll.interval.ms} ran out. Now the container stops as for any {@code Error}: consumer
 * closed, out of its group, a {@code ConsumerStoppedEvent} with reason {@code ERROR}; started
 * again, it applies every record once. A real PostgreSQL and the in-JVM broker; the {@code Error}
 * comes from the store, once.
 */
@SpringBootTest(classes = RecordListenerClearThreadStateErrorTest.App.class)
@DirtiesContext
class RecordListenerClearThreadStateErrorTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String TOPIC = "ctse-orders";
  static final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();
  static final List<ConsumerStoppedEvent.Reason> stops = new CopyOnWriteArrayList<>();
  static final AtomicBoolean nackUntilReleaseFailed = new AtomicBoolean();
  static final AtomicBoolean failNextRelease = new AtomicBoolean();
  static final AtomicBoolean releaseFailed = new AtomicBoolean();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "clear_state_error", TOPIC);
    // A nack cuts the poll short: the claims of the poll's later records are given back as the
    // consumer thread clears its state.
    registry.add("spring.kafka.listener.ack-mode", () -> "manual");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void anErrorGivingBackAPollsClaimsStopsTheContainerClosingItsConsumer() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(TOPIC);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    container.pause();
    await().atMost(WAIT).until(container::isContainerPaused);
    for (int i = 1; i <= 4; i++) {
      send("K-" + i);
    }
    nackUntilReleaseFailed.set(true);
    container.resume();

    await().atMost(WAIT).until(releaseFailed::get);
    await()
        .atMost(WAIT)
        .alias("the container stops, as for any Error")
        .until(() -> !container.isRunning());
    // Published once the consumer is closed, which leaves its group.
    await().atMost(WAIT).until(() -> !stops.isEmpty());
    assertThat(stops).containsExactly(ConsumerStoppedEvent.Reason.ERROR);
    assertThat(groupMembers()).as("the consumer closed, out of its group").isZero();
    assertThat(effects).as("nothing applied yet: K-1 was nacked").isEmpty();

    container.start();
    await().atMost(WAIT).until(() -> effects.size() == 4);
    effects.forEach((key, count) -> assertThat(count.get()).as(key).isEqualTo(1));
    for (int i = 1; i <= 4; i++) {
      int n = i;
      await().atMost(WAIT).until(() -> status("K-" + n) == DedupStatus.SUCCESS);
    }
  }

  private static int groupMembers() throws Exception {
    try (Admin admin =
        Admin.create(
            Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, TestKafka.bootstrapServers()))) {
      return admin
          .describeConsumerGroups(List.of(TOPIC))
          .describedGroups()
          .get(TOPIC)
          .get()
          .members()
          .size();
    }
  }

  private void send(String orderNo) throws Exception {
    SpringTestEnvironment.send(template, TOPIC, "payload of " + orderNo, "order-no", orderNo);
  }

  private DedupStatus status(String orderNo) {
    return store.find(DedupKey.of("ctse", orderNo)).map(DedupRecord::status).orElse(null);
  }

  static class Listener {
    @Idempotent(bizType = "ctse", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    void onOrder(String payload, @Header("order-no") String orderNo, Acknowledgment ack) {
      // Until a nack leaves claims to give back: K-1 may come in a poll of its own first.
      if (orderNo.equals("K-1") && nackUntilReleaseFailed.get() && !releaseFailed.get()) {
        failNextRelease.set(true);
        ack.nack(Duration.ofMillis(100));
        return;
      }
      effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      ack.acknowledge();
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listener listener() {
      return new Listener();
    }

    /** The auto-configured store, whose next give-back of claims, once armed, meets an Error. */
    @Bean
    DedupStore dedupStore(DataSource dataSource) {
      DedupStore target = JdbcDedupStore.builder(dataSource).build();
      return (DedupStore)
          Proxy.newProxyInstance(
              DedupStore.class.getClassLoader(),
              new Class<?>[] {DedupStore.class},
              (self, method, args) -> {
                if (method.getName().equals("releaseAll") && failNextRelease.getAndSet(false)) {
                  releaseFailed.set(true);
                  throw new OutOfMemoryError("injected: giving back the poll's unused claims");
                }
                try {
                  return method.invoke(target, args);
                } catch (InvocationTargetException e) {
                  throw e.getCause();
                }
              });
    }

    @EventListener
    void stopped(ConsumerStoppedEvent event) {
      stops.add(event.getReason());
    }
  }
}
