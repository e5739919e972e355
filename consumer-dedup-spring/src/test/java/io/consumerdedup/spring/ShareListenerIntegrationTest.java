package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.kafka.KafkaDeadLetterPublisher;
import io.consumerdedup.testing.TestShareGroups;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
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
 * {@code @Idempotent} listeners of a share group (KIP-932) served by spring-kafka 4.1's {@code
 * ShareKafkaListenerContainerFactory}, against the in-JVM broker and PostgreSQL: consumer-dedup
 * acknowledges each record as {@code DedupShareLoop} does. Spring Boot 4.0 refuses these listeners
 * at start-up ({@code ShareContainerStartupTest}), so the boot40 module leaves this class out.
 */
@SpringBootTest(
    classes = ShareListenerIntegrationTest.App.class,
    properties = {
      "consumer-dedup.max-attempts=3",
      "consumer-dedup.hold.initial-backoff=500ms",
      "consumer-dedup.hold.max-backoff=2s"
    })
@DirtiesContext
class ShareListenerIntegrationTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String MANY = "share-many";
  static final String SLOW = "share-slow";
  static final String FAILING = "share-failing";
  static final String KEYLESS = "share-keyless";
  static final String HELD = "share-held";
  static final String ERROR = "share-error";
  static final String QUEUED = "share-queued";
  static final String REFUSED = "share-refused";

  /** The lock of the groups whose tests outlast it on purpose. */
  static final Duration SHORT_LOCK = Duration.ofSeconds(2);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    String schema =
        SpringTestEnvironment.prepare(
            registry,
            "spring_share",
            MANY,
            SLOW,
            FAILING,
            FAILING + "-dlt",
            KEYLESS,
            KEYLESS + "-dlt",
            HELD,
            ERROR,
            QUEUED,
            REFUSED);
    // The database refuses the SUCCESS of the keys listed, as a transient failure.
    SpringTestEnvironment.refuseListedSuccesses(schema);
    TestShareGroups.configure(MANY, Duration.ofSeconds(5));
    TestShareGroups.configure(SLOW, SHORT_LOCK);
    TestShareGroups.configure(FAILING, Duration.ofSeconds(5));
    TestShareGroups.configure(KEYLESS, Duration.ofSeconds(5));
    TestShareGroups.configure(HELD, SHORT_LOCK);
    TestShareGroups.configure(ERROR, Duration.ofSeconds(5));
    TestShareGroups.configure(QUEUED, SHORT_LOCK);
    TestShareGroups.configure(REFUSED, SHORT_LOCK);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;

  /**
   * Three consumers of one partition, 40 orders sent three times each, the copies mixed: the user
   * sees each order charged once, the records shared out among the consumers, and nothing left in
   * the queue.
   */
  @Test
  void threeConsumersOfOnePartitionApplyEachKeyOnce() throws Exception {
    int keys = 40;
    List<String> sends = new ArrayList<>();
    for (int copy = 0; copy < 3; copy++) {
      for (int i = 0; i < keys; i++) {
        sends.add("M-" + i);
      }
    }
    Collections.shuffle(sends, new java.util.Random(7));
    for (String orderNo : sends) {
      send(template, MANY, "charge " + orderNo, "order-no", orderNo);
    }

    await().atMost(WAIT).until(() -> effects(MANY) == keys);
    Thread.sleep(SHORT_LOCK.toMillis()); // any copy still on its way would be applied by now
    assertThat(effects(MANY)).isEqualTo(keys);
    for (int i = 0; i < keys; i++) {
      assertThat(effectsOf(MANY, "M-" + i)).as("order M-%d charged", i).isEqualTo(1);
    }
    assertThat(Calls.threads(MANY)).as("consumers that took records").hasSizeGreaterThan(1);
    assertThat(TestShareGroups.remaining(MANY, MANY, Duration.ofSeconds(2))).isEmpty();
  }

  /**
   * A handler that runs for three lock durations while a second consumer of the group waits: the
   * user sees the record delivered once and run once, never by two consumers at once, because its
   * lock was renewed while it ran.
   */
  @Test
  void aHandlerSlowerThanTheLockKeepsItsRecordAndRunsOnce() throws Exception {
    send(template, SLOW, "rebuild report", "order-no", "S-1");

    await().atMost(WAIT).until(() -> effectsOf(SLOW, "S-1") == 1);
    Thread.sleep(SHORT_LOCK.toMillis() * 2); // a second delivery, had the lock run out
    assertThat(Calls.of(SLOW, "S-1")).as("listener calls").isEqualTo(1);
    assertThat(Calls.mostAtOnce(SLOW)).isEqualTo(1);
    assertThat(Calls.deliveries(SLOW)).as("delivery counts seen").containsExactly((short) 1);
    assertThat(effectsOf(SLOW, "S-1")).isEqualTo(1);
    assertThat(TestShareGroups.remaining(SLOW, SLOW, Duration.ofSeconds(2))).isEmpty();
  }

  /**
   * A listener that always fails, with {@code consumer-dedup.max-attempts=3}: the user sees it run
   * three times (released for another delivery after each of the first two), then the record in the
   * dead-letter topic, rejected: never delivered again.
   */
  @Test
  void aFailingHandlerIsDeadLetteredAfterItsAttemptsAndRejected() throws Exception {
    send(template, FAILING, "charge 12.00", "order-no", "F-1");

    List<ConsumerRecord<String, String>> deadLetters = readTopic(FAILING + "-dlt", 1, WAIT);
    assertThat(deadLetters).hasSize(1);
    assertThat(header(deadLetters.get(0), "order-no")).isEqualTo("F-1");
    assertThat(header(deadLetters.get(0), KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
        .contains("card declined");
    Thread.sleep(3000); // a release instead of the reject would have brought a fourth call
    assertThat(Calls.of(FAILING, "F-1")).isEqualTo(3);
    assertThat(store.find(DedupKey.of("declined", "F-1")).orElseThrow().status())
        .isEqualTo(DedupStatus.FAILED);
    assertThat(TestShareGroups.remaining(FAILING, FAILING, Duration.ofSeconds(2))).isEmpty();
  }

  /**
   * A record without its key header: the user sees it in the dead-letter topic at once, the
   * listener never run, and the record rejected (not in the queue any more).
   */
  @Test
  void aRecordWithoutItsKeyIsDeadLetteredAndRejected() throws Exception {
    send(template, KEYLESS, "charge 9.00");

    List<ConsumerRecord<String, String>> deadLetters = readTopic(KEYLESS + "-dlt", 1, WAIT);
    assertThat(deadLetters).hasSize(1);
    assertThat(deadLetters.get(0).value()).isEqualTo("charge 9.00");
    assertThat(header(deadLetters.get(0), KafkaDeadLetterPublisher.EXCEPTION_CLASS_HEADER))
        .contains("DedupKeyMissingException");
    assertThat(Calls.of(KEYLESS, "")).isZero();
    assertThat(TestShareGroups.remaining(KEYLESS, KEYLESS, Duration.ofSeconds(2))).isEmpty();
  }

  /**
   * A copy of a key that another consumer holds under a live lease, for six lock durations (long
   * enough for a record released at each try to reach the broker's limit of five deliveries and be
   * archived): the user sees the record kept by its consumer meanwhile, then applied once after the
   * holder gave up, on its first delivery.
   */
  @Test
  void aCopyMeetingALiveClaimIsKeptAcquiredAndAppliedOnceTheHolderIsDone() throws Exception {
    DedupKey key = DedupKey.of("held", "H-1");
    try (IdempotentExecutor elsewhere =
        IdempotentExecutor.builder(store)
            .ownerId("another-consumer")
            .lease(Duration.ofMinutes(1))
            .build()) {
      DedupClaim claim = elsewhere.claim(key, null, "elsewhere");
      send(template, HELD, "charge 70.00", "order-no", "H-1");

      Thread.sleep(SHORT_LOCK.toMillis() * 6);
      assertThat(Calls.of(HELD, "H-1")).as("not run while held elsewhere").isZero();
      assertThat(store.find(key).orElseThrow().owner()).isEqualTo("another-consumer");

      claim.release(); // the holder is done without applying it
    }

    await().atMost(WAIT).until(() -> effectsOf(HELD, "H-1") == 1);
    assertThat(Calls.of(HELD, "H-1")).isEqualTo(1);
    assertThat(Calls.deliveries(HELD)).as("delivery counts seen").containsExactly((short) 1);
    // The SUCCESS mark is written in the background, after the effect.
    await().atMost(WAIT).until(() -> store.find(key).orElseThrow().status() == DedupStatus.SUCCESS);
    assertThat(TestShareGroups.remaining(HELD, HELD, Duration.ofSeconds(2))).isEmpty();
  }

  /**
   * A listener that throws a {@code StackOverflowError} on its first call: the user sees that call
   * counted as a failed attempt of its record, the record run again and applied once, and the
   * records after it applied as well; the listener is not stuck for good.
   */
  @Test
  void anErrorFromTheListenerFailsItsRecordAndTheRecordsAfterItAreStillApplied() throws Exception {
    send(template, ERROR, "charge 1.00", "order-no", "E-1");
    await().atMost(WAIT).until(() -> Calls.of(ERROR, "E-1") >= 1);
    send(template, ERROR, "charge 2.00", "order-no", "E-2");
    send(template, ERROR, "charge 3.00", "order-no", "E-3");

    await().atMost(WAIT).until(() -> effects(ERROR) == 3);
    assertThat(Calls.of(ERROR, "E-1")).as("the Error's call, then the retry").isEqualTo(2);
    for (String orderNo : List.of("E-1", "E-2", "E-3")) {
      assertThat(effectsOf(ERROR, orderNo)).as("order %s charged", orderNo).isEqualTo(1);
    }
    assertThat(store.find(DedupKey.of("error", "E-1")).orElseThrow().attempts()).isEqualTo(2);
    assertThat(TestShareGroups.remaining(ERROR, ERROR, Duration.ofSeconds(2))).isEmpty();
  }

  /**
   * A record whose handler ran but whose SUCCESS the database refuses for a while: the user sees
   * the record kept acquired, not acknowledged (the group's lag stays at one record, past several
   * lock durations), until its SUCCESS is written, then acknowledged, and the order charged once.
   * Accepted at once, the record would leave the queue while its key stayed PROCESSING: had the
   * process died before the SUCCESS was written, a later copy would be charged again.
   */
  @Test
  void aRecordWhoseSuccessIsNotWrittenYetIsAcknowledgedOnlyOnceItIs() throws Exception {
    DedupKey key = DedupKey.of("refused", "R-1");
    send(template, REFUSED, "charge 4.00", "order-no", "R-0"); // the group's lag known from here
    await().atMost(WAIT).until(() -> TestShareGroups.lag(REFUSED, REFUSED) == 0);
    jdbc.update("INSERT INTO mark_faults (biz_key) VALUES ('R-1')");
    try {
      send(template, REFUSED, "charge 5.00", "order-no", "R-1");
      await().atMost(WAIT).until(() -> effectsOf(REFUSED, "R-1") == 1);
      long hits = faultHits();
      await().atMost(WAIT).until(() -> faultHits() > hits); // refused, and tried again
      long end = System.nanoTime() + SHORT_LOCK.toNanos() * 3;
      while (System.nanoTime() < end) {
        assertThat(TestShareGroups.lag(REFUSED, REFUSED))
            .as("records not acknowledged while the SUCCESS is refused")
            .isEqualTo(1);
        Thread.sleep(300);
      }
      assertThat(store.find(key).orElseThrow().status()).isEqualTo(DedupStatus.PROCESSING);
    } finally {
      jdbc.update("DELETE FROM mark_faults");
    }
    await().atMost(WAIT).until(() -> TestShareGroups.lag(REFUSED, REFUSED) == 0);
    assertThat(store.find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(Calls.of(REFUSED, "R-1")).as("listener calls").isEqualTo(1);
    assertThat(Calls.deliveries(REFUSED))
        .as("delivery counts seen")
        .containsExactly((short) 1, (short) 1);
    assertThat(effectsOf(REFUSED, "R-1")).isEqualTo(1);
  }

  /**
   * A record sent while the listener runs for eight lock durations on another: the user sees it
   * applied once, on its first delivery. Renewals sent with the container's polls fetched it, and
   * its locks ran out in the consumer's buffer until the long record was done: it came on its third
   * delivery, and a longer handler would have had it archived unapplied.
   */
  @Test
  void aRecordSentWhileALongHandlerRunsIsAppliedOnItsFirstDelivery() throws Exception {
    send(template, QUEUED, "rebuild everything", "order-no", "Q-slow");
    await().atMost(WAIT).until(() -> Calls.of(QUEUED, "Q-slow") == 1);
    send(template, QUEUED, "charge 5.00", "order-no", "Q-next");

    await().atMost(WAIT).until(() -> effectsOf(QUEUED, "Q-next") == 1);
    assertThat(effectsOf(QUEUED, "Q-slow")).isEqualTo(1);
    assertThat(Calls.deliveries(QUEUED))
        .as("delivery counts seen")
        .containsExactly((short) 1, (short) 1);
    assertThat(TestShareGroups.remaining(QUEUED, QUEUED, Duration.ofSeconds(2))).isEmpty();
  }

  private int effects(String listener) {
    Integer count =
        jdbc.queryForObject(
            "SELECT count(*) FROM effects WHERE listener = ?", Integer.class, listener);
    return count == null ? 0 : count;
  }

  private long faultHits() {
    return SpringTestEnvironment.refusedSuccesses(jdbc);
  }

  private int effectsOf(String listener, String orderNo) {
    return SpringTestEnvironment.effects(jdbc, listener, orderNo);
  }

  /** What the listeners saw. */
  static final class Calls {
    static final Map<String, AtomicInteger> calls = new ConcurrentHashMap<>();
    static final Map<String, Set<String>> threads = new ConcurrentHashMap<>();
    static final Map<String, List<Short>> deliveries = new ConcurrentHashMap<>();
    static final Map<String, AtomicInteger> running = new ConcurrentHashMap<>();
    static final Map<String, AtomicInteger> mostAtOnce = new ConcurrentHashMap<>();

    static void enter(String listener, ConsumerRecord<String, String> record) {
      calls
          .computeIfAbsent(listener + "/" + orderNo(record), k -> new AtomicInteger())
          .incrementAndGet();
      threads
          .computeIfAbsent(listener, k -> ConcurrentHashMap.newKeySet())
          .add(Thread.currentThread().getName());
      deliveries
          .computeIfAbsent(listener, k -> new CopyOnWriteArrayList<>())
          .add(record.deliveryCount().orElse((short) 0));
      int now = running.computeIfAbsent(listener, k -> new AtomicInteger()).incrementAndGet();
      mostAtOnce
          .computeIfAbsent(listener, k -> new AtomicInteger())
          .accumulateAndGet(now, Math::max);
    }

    static void exit(String listener) {
      running.get(listener).decrementAndGet();
    }

    static int of(String listener, String orderNo) {
      AtomicInteger count = calls.get(listener + "/" + orderNo);
      return count == null ? 0 : count.get();
    }

    static Set<String> threads(String listener) {
      return threads.getOrDefault(listener, Set.of());
    }

    static List<Short> deliveries(String listener) {
      return deliveries.getOrDefault(listener, List.of());
    }

    static int mostAtOnce(String listener) {
      AtomicInteger most = mostAtOnce.get(listener);
      return most == null ? 0 : most.get();
    }

    private static String orderNo(ConsumerRecord<String, String> record) {
      return header(record, "order-no");
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

    @Idempotent(bizType = "many", header = "order-no")
    @KafkaListener(
        id = MANY,
        topics = MANY,
        groupId = MANY,
        containerFactory = "shareFactory",
        concurrency = "3")
    public void many(ConsumerRecord<String, String> record) throws InterruptedException {
      Calls.enter(MANY, record);
      try {
        Thread.sleep(20); // some work, so that the consumers overlap
        apply(MANY, record);
      } finally {
        Calls.exit(MANY);
      }
    }

    @Idempotent(bizType = "slow", header = "order-no")
    @KafkaListener(
        id = SLOW,
        topics = SLOW,
        groupId = SLOW,
        containerFactory = "shareFactory",
        concurrency = "2")
    public void slow(ConsumerRecord<String, String> record) throws InterruptedException {
      Calls.enter(SLOW, record);
      try {
        Thread.sleep(SHORT_LOCK.toMillis() * 3);
        apply(SLOW, record);
      } finally {
        Calls.exit(SLOW);
      }
    }

    @Idempotent(bizType = "queued", header = "order-no")
    @KafkaListener(
        id = QUEUED,
        topics = QUEUED,
        groupId = QUEUED,
        containerFactory = "shareFactory")
    public void queued(ConsumerRecord<String, String> record) throws InterruptedException {
      Calls.enter(QUEUED, record);
      try {
        if (header(record, "order-no").equals("Q-slow")) {
          Thread.sleep(SHORT_LOCK.toMillis() * 8);
        }
        apply(QUEUED, record);
      } finally {
        Calls.exit(QUEUED);
      }
    }

    @Idempotent(bizType = "declined", header = "order-no")
    @KafkaListener(
        id = FAILING,
        topics = FAILING,
        groupId = FAILING,
        containerFactory = "shareFactory")
    public void failing(ConsumerRecord<String, String> record) {
      Calls.enter(FAILING, record);
      Calls.exit(FAILING);
      throw new IllegalStateException("card declined");
    }

    @Idempotent(bizType = "keyless", header = "order-no")
    @KafkaListener(
        id = KEYLESS,
        topics = KEYLESS,
        groupId = KEYLESS,
        containerFactory = "shareFactory")
    public void keyless(ConsumerRecord<String, String> record) {
      Calls.enter(KEYLESS, record);
      Calls.exit(KEYLESS);
      apply(KEYLESS, record);
    }

    @Idempotent(bizType = "held", header = "order-no")
    @KafkaListener(id = HELD, topics = HELD, groupId = HELD, containerFactory = "shareFactory")
    public void held(ConsumerRecord<String, String> record) {
      Calls.enter(HELD, record);
      Calls.exit(HELD);
      apply(HELD, record);
    }

    @Idempotent(bizType = "error", header = "order-no")
    @KafkaListener(id = ERROR, topics = ERROR, groupId = ERROR, containerFactory = "shareFactory")
    public void error(ConsumerRecord<String, String> record) {
      Calls.enter(ERROR, record);
      Calls.exit(ERROR);
      if (Calls.of(ERROR, header(record, "order-no")) == 1
          && "E-1".equals(header(record, "order-no"))) {
        throw new StackOverflowError("deep recursion in the handler");
      }
      apply(ERROR, record);
    }

    @Idempotent(bizType = "refused", header = "order-no")
    @KafkaListener(
        id = REFUSED,
        topics = REFUSED,
        groupId = REFUSED,
        containerFactory = "shareFactory")
    public void refused(ConsumerRecord<String, String> record) {
      Calls.enter(REFUSED, record);
      Calls.exit(REFUSED);
      apply(REFUSED, record);
    }

    private void apply(String listener, ConsumerRecord<String, String> record) {
      jdbc.update(
          "INSERT INTO effects (listener, biz_key, payload) VALUES (?, ?, ?)",
          listener,
          header(record, "order-no"),
          record.value());
    }
  }
}
