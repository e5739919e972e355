package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.testing.TestShareGroups;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An {@code @Idempotent} share listener claims the records handed to its worker together in one
 * statement, as {@code DedupShareLoop} claims a poll, against the in-JVM broker and PostgreSQL.
 * Each test holds the listener on a first record (the gate) while the others arrive, so that they
 * wait for the worker together, as records do whenever the listener is busy.
 */
@SpringBootTest(
    classes = ShareListenerBatchClaimsTest.App.class,
    properties = {
      "consumer-dedup.max-attempts=3",
      "consumer-dedup.hold.initial-backoff=500ms",
      "consumer-dedup.hold.max-backoff=2s"
    })
@DirtiesContext
class ShareListenerBatchClaimsTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String BATCH = "share-batch";
  static final String BROKEN = "share-batch-error";
  static final String TWINS = "share-batch-twins";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    String schema =
        SpringTestEnvironment.prepare(registry, "spring_share_batch", BATCH, BROKEN, TWINS);
    SpringTestEnvironment.noteDedupTransactions(schema);
    TestShareGroups.configure(BATCH, Duration.ofSeconds(5));
    TestShareGroups.configure(BROKEN, Duration.ofSeconds(5));
    TestShareGroups.configure(TWINS, Duration.ofSeconds(5));
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;

  /**
   * 200 orders that reach the listener while it is busy: the user sees each charged once, every
   * record acknowledged, and their keys claimed in a handful of transactions instead of 200 (and as
   * many more for their SUCCESS marks).
   */
  @Test
  void recordsWaitingForTheListenerAreClaimedTogether() throws Exception {
    int orders = 200;
    Gate gate = Gate.of(BATCH);
    send(template, BATCH, "open the gate", "order-no", "gate");
    assertThat(gate.entered.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();
    for (int i = 0; i < orders; i++) {
      send(template, BATCH, "charge " + i, "order-no", "B-" + i);
    }
    Thread.sleep(2000); // the container hands them to the listener's worker meanwhile
    int claimsBefore = SpringTestEnvironment.transactions(jdbc, "batch", "PROCESSING");
    gate.open.countDown();

    await().atMost(WAIT).until(() -> effects(BATCH) == orders + 1);
    await().atMost(WAIT).until(() -> TestShareGroups.lag(BATCH, BATCH) == 0);
    for (int i = 0; i < orders; i++) {
      assertThat(effectsOf(BATCH, "B-" + i)).as("order B-%d charged", i).isEqualTo(1);
    }
    int claims = SpringTestEnvironment.transactions(jdbc, "batch", "PROCESSING") - claimsBefore;
    int marks = SpringTestEnvironment.transactions(jdbc, "batch", "SUCCESS");
    System.out.printf(
        "[share batch] %d records: %d claim transactions, %d SUCCESS transactions%n",
        orders, claims, marks);
    assertThat(claims).as("claim transactions for %d records", orders).isLessThan(orders / 5);
    assertThat(processing("batch")).isZero();
    assertThat(TestShareGroups.remaining(BATCH, BATCH, Duration.ofSeconds(2))).isEmpty();
  }

  /**
   * A listener that throws a {@code StackOverflowError} at the fifth of ten records claimed
   * together: the user sees the other records' claims given back at once (none left PROCESSING
   * under this consumer's lease, which it renews for as long as it lives and which would hold their
   * keys from every delivery), and each order charged once, the failed one on its second call.
   */
  @Test
  void anErrorInTheMiddleOfABatchGivesBackTheClaimsOfTheOthers() throws Exception {
    Gate gate = Gate.of(BROKEN);
    send(template, BROKEN, "open the gate", "order-no", "gate");
    assertThat(gate.entered.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();
    for (int i = 0; i < 10; i++) {
      send(template, BROKEN, "charge " + i, "order-no", "X-" + i);
    }
    Thread.sleep(2000);
    gate.open.countDown();

    await().atMost(WAIT).until(() -> effects(BROKEN) == 11);
    assertThat(calls(BROKEN, "X-4")).as("the Error's call, then the retry").isEqualTo(2);
    for (int i = 0; i < 10; i++) {
      assertThat(effectsOf(BROKEN, "X-" + i)).as("order X-%d charged", i).isEqualTo(1);
    }
    assertThat(store.find(DedupKey.of("broken", "X-4")).orElseThrow().attempts()).isEqualTo(2);
    await().atMost(WAIT).until(() -> processing("broken") == 0);
    await().atMost(WAIT).until(() -> TestShareGroups.lag(BROKEN, BROKEN) == 0);
    assertThat(store.find(DedupKey.of("broken", "X-9")).orElseThrow().status())
        .isEqualTo(DedupStatus.SUCCESS);
  }

  /**
   * An order sent twice while the listener is busy, so that both copies are claimed in one batch:
   * the user sees it charged once, the listener called once, and both records acknowledged (the
   * copy accepted as a duplicate, not held or released).
   */
  @Test
  void aCopyClaimedInOneBatchWithItsOriginalIsAcceptedAsADuplicate() throws Exception {
    Gate gate = Gate.of(TWINS);
    send(template, TWINS, "open the gate", "order-no", "gate");
    assertThat(gate.entered.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();
    send(template, TWINS, "charge once", "order-no", "T-1");
    send(template, TWINS, "charge once", "order-no", "T-1");
    Thread.sleep(2000);
    gate.open.countDown();

    await().atMost(WAIT).until(() -> TestShareGroups.lag(TWINS, TWINS) == 0);
    assertThat(calls(TWINS, "T-1")).as("the listener called for the original only").isEqualTo(1);
    assertThat(effectsOf(TWINS, "T-1")).isEqualTo(1);
    assertThat(TestShareGroups.remaining(TWINS, TWINS, Duration.ofSeconds(2))).isEmpty();
  }

  private int processing(String bizType) {
    Integer count =
        jdbc.queryForObject(
            "SELECT count(*) FROM consumer_dedup WHERE biz_type = ? AND status = 'PROCESSING'",
            Integer.class,
            bizType);
    return count == null ? 0 : count;
  }

  private int effects(String listener) {
    Integer count =
        jdbc.queryForObject(
            "SELECT count(*) FROM effects WHERE listener = ?", Integer.class, listener);
    return count == null ? 0 : count;
  }

  private int effectsOf(String listener, String orderNo) {
    return SpringTestEnvironment.effects(jdbc, listener, orderNo);
  }

  static final Map<String, AtomicInteger> CALLS = new ConcurrentHashMap<>();

  static int calls(String listener, String orderNo) {
    AtomicInteger count = CALLS.get(listener + "/" + orderNo);
    return count == null ? 0 : count.get();
  }

  /** Holds a listener on its record {@code gate} until the test opens it. */
  static final class Gate {
    static final Map<String, Gate> GATES = new ConcurrentHashMap<>();
    final CountDownLatch entered = new CountDownLatch(1);
    final CountDownLatch open = new CountDownLatch(1);

    static Gate of(String listener) {
      return GATES.computeIfAbsent(listener, l -> new Gate());
    }

    void pass() throws InterruptedException {
      entered.countDown();
      if (!open.await(WAIT.toSeconds(), TimeUnit.SECONDS)) {
        throw new IllegalStateException("the gate was never opened");
      }
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.stringShareFactory();
    }

    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }
  }

  static class Listeners {
    private final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "batch", header = "order-no")
    @KafkaListener(id = BATCH, topics = BATCH, groupId = BATCH, containerFactory = "shareFactory")
    public void batch(ConsumerRecord<String, String> record) throws InterruptedException {
      enter(BATCH, record);
      apply(BATCH, record);
    }

    @Idempotent(bizType = "broken", header = "order-no")
    @KafkaListener(
        id = BROKEN,
        topics = BROKEN,
        groupId = BROKEN,
        containerFactory = "shareFactory")
    public void broken(ConsumerRecord<String, String> record) throws InterruptedException {
      int call = enter(BROKEN, record);
      if (call == 1 && "X-4".equals(header(record, "order-no"))) {
        throw new StackOverflowError("deep recursion in the handler");
      }
      apply(BROKEN, record);
    }

    @Idempotent(bizType = "twins", header = "order-no")
    @KafkaListener(id = TWINS, topics = TWINS, groupId = TWINS, containerFactory = "shareFactory")
    public void twins(ConsumerRecord<String, String> record) throws InterruptedException {
      enter(TWINS, record);
      apply(TWINS, record);
    }

    private static int enter(String listener, ConsumerRecord<String, String> record)
        throws InterruptedException {
      String orderNo = header(record, "order-no");
      if (orderNo.equals("gate")) {
        Gate.of(listener).pass();
      }
      return CALLS
          .computeIfAbsent(listener + "/" + orderNo, k -> new AtomicInteger())
          .incrementAndGet();
    }

    private void apply(String listener, ConsumerRecord<String, String> record) {
      SpringTestEnvironment.effect(jdbc, listener, header(record, "order-no"), record.value());
    }
  }
}
