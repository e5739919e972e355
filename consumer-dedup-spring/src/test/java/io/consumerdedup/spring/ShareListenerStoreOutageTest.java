package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TcpProxy;
import io.consumerdedup.testing.TestShareGroups;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An {@code @Idempotent} share listener while PostgreSQL refuses connections (a real outage: the
 * application's connections run through a proxy that resets them and refuses new ones). A record
 * released at each failed claim, or left to its lock, spends a delivery each time, and the broker
 * archives it unapplied after the fifth. Spring Boot 4.0 refuses share listeners, so the boot40
 * module leaves this class out.
 */
@SpringBootTest(
    classes = ShareListenerStoreOutageTest.App.class,
    properties = {
      // A connection waited for longer than the lock: the claim blocks past it.
      "spring.datasource.hikari.connection-timeout=5000",
      "consumer-dedup.hold.initial-backoff=500ms",
      "consumer-dedup.hold.max-backoff=2s"
    })
@DirtiesContext
class ShareListenerStoreOutageTest {
  static final String DOWN = "share-outage-claim";
  static final String STOPPED = "share-outage-stop";
  static final Duration LOCK = Duration.ofSeconds(3);

  /** Long enough to tell a record given back by the stop from one left to its lock. */
  static final Duration LONG_LOCK = Duration.ofSeconds(20);

  /** Four locks: a record left to its lock, or released at each failed claim, spends them all. */
  static final Duration OUTAGE = LOCK.multipliedBy(4);

  static final Duration WAIT = Duration.ofSeconds(60);

  /** Each delivery the listener ran for, as "order/delivery count". */
  static final List<String> runs = new CopyOnWriteArrayList<>();

  static final Map<String, AtomicInteger> applied = new ConcurrentHashMap<>();
  static TcpProxy proxy;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    proxy = TcpProxy.forPostgres();
    SpringTestEnvironment.prepare(
        registry,
        "spring_share_outage",
        proxy::rewrite,
        1,
        DOWN,
        DOWN + "-dlt",
        STOPPED,
        STOPPED + "-dlt");
    TestShareGroups.configure(DOWN, LOCK);
    TestShareGroups.configure(STOPPED, LONG_LOCK);
  }

  @AfterAll
  static void closeProxy() {
    proxy.close();
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired KafkaListenerEndpointRegistry registry;
  @Autowired JdbcDedupStore store;

  /**
   * The user sees the record applied once, on its first delivery, after an outage of four locks
   * during which its claim waited past its lock.
   */
  @Test
  void aRecordWhoseClaimWaitsForTheDatabasePastItsLockIsAppliedOnItsFirstDelivery()
      throws Exception {
    awaitConnected(DOWN);
    proxy.refuse();
    long downSince = System.nanoTime();
    int connections = proxy.connectionsAccepted();
    try {
      SpringTestEnvironment.send(template, DOWN, "charge 1.00", "order-no", "D-1");
      Thread.sleep(OUTAGE.toMillis());
      assertThat(runsOf("D-")).as("listener runs while the database is down").isEmpty();
      assertThat(proxy.connectionsAccepted())
          .as("connections while refusing")
          .isEqualTo(connections);
    } finally {
      proxy.pass();
    }
    await().atMost(WAIT).until(() -> appliedCount("D-1") == 1);
    await().atMost(WAIT).until(() -> TestShareGroups.lag(DOWN, DOWN) == 0);
    assertThat(Duration.ofNanos(System.nanoTime() - downSince)).isGreaterThan(OUTAGE);
    assertThat(runsOf("D-")).as("listener runs (order/delivery)").containsExactly("D-1/1");
  }

  /**
   * The container is stopped while the claim waits for the database: the user sees the record given
   * back at once (one delivery spent, not left to its 20 s lock) and applied once when the
   * container runs again, nothing recorded for it meanwhile.
   */
  @Test
  void aContainerStoppedWhileItsClaimWaitsForTheDatabaseGivesTheRecordBackOnce() throws Exception {
    MessageListenerContainer container = registry.getListenerContainer(STOPPED);
    awaitConnected(STOPPED);
    proxy.refuse();
    long stopped;
    try {
      SpringTestEnvironment.send(template, STOPPED, "charge 2.00", "order-no", "S-1");
      Thread.sleep(LOCK.toMillis()); // the claim under way, waiting for a connection
      container.stop();
      stopped = System.nanoTime();
    } finally {
      proxy.pass();
    }
    assertThat(runsOf("S-")).as("listener runs before the restart").isEmpty();
    assertThat(store.find(DedupKey.of(STOPPED, "S-1")))
        .as("what is recorded for the key")
        .isEmpty();

    container.start();
    await().atMost(WAIT).until(() -> appliedCount("S-1") == 1);
    Duration applied = Duration.ofNanos(System.nanoTime() - stopped);
    await().atMost(WAIT).until(() -> TestShareGroups.lag(STOPPED, STOPPED) == 0);
    assertThat(runsOf("S-")).as("listener runs (order/delivery)").containsExactly("S-1/2");
    assertThat(applied)
        .as("applied after the stop: given back by the stop, not left to its lock")
        .isLessThan(LONG_LOCK.dividedBy(2));
  }

  /** The container's consumer has joined its group, so the record sent next is fetched at once. */
  private static void awaitConnected(String group) {
    await().atMost(WAIT).until(() -> TestShareGroups.members(group) == 1);
  }

  private static List<String> runsOf(String prefix) {
    return runs.stream().filter(run -> run.startsWith(prefix)).toList();
  }

  private static int appliedCount(String orderNo) {
    AtomicInteger count = applied.get(orderNo);
    return count == null ? 0 : count.get();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.groupShareFactory(DOWN);
    }

    @Bean
    Listeners listeners() {
      return new Listeners();
    }
  }

  static class Listeners {
    @Idempotent(bizType = DOWN, header = "order-no")
    @KafkaListener(id = DOWN, topics = DOWN, groupId = DOWN, containerFactory = "shareFactory")
    public void down(ConsumerRecord<String, String> record) {
      run(record);
    }

    @Idempotent(bizType = STOPPED, header = "order-no")
    @KafkaListener(
        id = STOPPED,
        topics = STOPPED,
        groupId = STOPPED,
        containerFactory = "shareFactory")
    public void stopped(ConsumerRecord<String, String> record) {
      run(record);
    }

    private static void run(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      runs.add(orderNo + "/" + record.deliveryCount().orElse((short) 0));
      applied.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
    }
  }
}
