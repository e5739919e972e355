package io.consumerdedup.spring.autoconfigure;

import static io.consumerdedup.spring.ShareListenerTests.apply;
import static io.consumerdedup.spring.ShareListenerTests.awaitAppliedOnceAndAccepted;
import static io.consumerdedup.spring.ShareListenerTests.orderNo;
import static io.consumerdedup.spring.ShareListenerTests.sendOrder;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.spring.ShareListenerTests;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.context.event.EventListener;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.event.ConsumerStoppedEvent;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * The share listener's keeper puts a record it is given among those it renews, then hands it to its
 * worker. A hand-over that throws (an {@code OutOfMemoryError} allocating the worker's queue node)
 * left the record among them. As the keeper handed its undecided records to the worker replacing
 * one that a handler's Error ended, such a record was renewed for good and never handled, and held
 * back every record after it; as the container offered a record, an exception reached the
 * container's recoverer, which rejected the record unapplied. Likewise a decided record whose
 * acknowledgement or lock renewal threw was forgotten unacknowledged, or one whose decision the
 * keeper could not take in was renewed for good, and its consumer polled nothing more (once queued
 * again, a taking-in that threw every time was tried again in a tight loop). Package-private hooks
 * make the hand-over, the acknowledgement and the renewal throw. Spring Boot 4.0 refuses share
 * listeners, so the boot40 module leaves this class out.
 */
@SpringBootTest(classes = ShareListenerHandOverFailureTest.App.class)
@DirtiesContext
class ShareListenerHandOverFailureTest {
  static final String ERROR = "share-handover-error";
  static final String EXCEPTION = "share-handover-exception";
  static final String REPLACED = "share-handover-replaced";
  static final String ACKNOWLEDGED = "share-handover-acknowledged";
  static final String RENEWED = "share-handover-renewed";
  static final String DECIDED = "share-handover-decided";
  static final String DECIDED_FAILING = "share-handover-decided-failing";
  static final String DECIDED_FAILING_ERROR = "share-handover-decided-failing-error";
  static final String SET_ASIDE = "share-handover-set-aside";
  static final Duration LOCK = Duration.ofSeconds(3);
  static final Duration WAIT = Duration.ofSeconds(20);

  /** Handler calls that returned, by order number. */
  static final Map<String, AtomicInteger> applied = new ConcurrentHashMap<>();

  static final List<ConsumerStoppedEvent.Reason> errorContainerStops = new CopyOnWriteArrayList<>();

  /** Counted down as R-2 is handed to the worker whose handler of R-1 is about to throw. */
  static final CountDownLatch secondHandedOver = new CountDownLatch(1);

  static final CountDownLatch firstRunning = new CountDownLatch(1);

  /** Listener calls for S-1, whether they returned or not. */
  static final AtomicInteger setAsideRuns = new AtomicInteger();

  /** Counted down once the renewal of N-1's lock threw. */
  static final CountDownLatch renewalFailed = new CountDownLatch(1);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    TestKafka.createTopics(1, ERROR, ERROR + "-dlt", EXCEPTION, EXCEPTION + "-dlt");
    TestKafka.createTopics(1, REPLACED, REPLACED + "-dlt", ACKNOWLEDGED, ACKNOWLEDGED + "-dlt");
    TestKafka.createTopics(1, DECIDED, DECIDED + "-dlt");
    TestKafka.createTopics(
        1,
        DECIDED_FAILING,
        DECIDED_FAILING + "-dlt",
        DECIDED_FAILING_ERROR,
        DECIDED_FAILING_ERROR + "-dlt",
        SET_ASIDE,
        SET_ASIDE + "-dlt");
    ShareListenerTests.prepare(
        registry, "spring_share_hand_over_failure", 6, RENEWED, RENEWED + "-dlt");
    registry.add("consumer-dedup.share.retry-backoff", () -> "200ms");
    for (String group :
        List.of(
            ERROR,
            EXCEPTION,
            REPLACED,
            ACKNOWLEDGED,
            RENEWED,
            DECIDED,
            DECIDED_FAILING,
            DECIDED_FAILING_ERROR,
            SET_ASIDE)) {
      TestShareGroups.configure(group, LOCK);
    }
  }

  @Autowired KafkaListenerEndpointRegistry registry;

  /**
   * The user sees the container's consumer stop on the {@code Error}, as spring-kafka stops it on
   * any, and the record applied once when the container runs again. So it was before the fix: the
   * consumer's close finished its keeper, whose records it then gave back.
   */
  @Test
  void aRecordWhoseHandOverThrowsAnErrorIsAppliedOnceTheContainerRunsAgain() throws Exception {
    MessageListenerContainer container = registry.getListenerContainer(ERROR);
    AtomicBoolean thrown = failFirstHandOver(ERROR, () -> new OutOfMemoryError("Java heap space"));

    sendOrder(ERROR, "E-1");
    await()
        .atMost(WAIT)
        .alias("the container's consumer stops on the Error")
        .until(() -> !errorContainerStops.isEmpty());
    assertThat(errorContainerStops).containsExactly(ConsumerStoppedEvent.Reason.ERROR);

    assertThat(thrown).as("the hand-over threw").isTrue();
    container.stop();
    container.start();
    awaitAppliedOnceAndAccepted(applied, WAIT, ERROR, "E-1");
  }

  /**
   * The user sees the record applied once. Before the fix the exception reached the container,
   * whose recoverer (by default) rejected the record: archived, never applied nor dead-lettered.
   */
  @Test
  void aRecordWhoseHandOverThrowsAnExceptionIsAppliedOnce() throws Exception {
    AtomicBoolean thrown =
        failFirstHandOver(EXCEPTION, () -> new IllegalStateException("Queue full"));

    sendOrder(EXCEPTION, "X-1");
    awaitAppliedOnceAndAccepted(applied, WAIT, EXCEPTION, "X-1");
    assertThat(thrown).as("the hand-over threw").isTrue();
  }

  /**
   * A handler's {@code Error} ends the worker, and the keeper hands the undecided records to a new
   * one: the user sees R-2, polled with R-1 and waiting behind it when R-1's handler threw, applied
   * once. Before the fix a throw handing it over left it renewed for good and never applied.
   */
  @Test
  void aRecordWhoseHandOverToTheNewWorkerThrowsIsAppliedOnce() throws Exception {
    DedupShareListener<?, ?> listener = listener(REPLACED);
    AtomicBoolean failNext = new AtomicBoolean();
    AtomicBoolean thrown = new AtomicBoolean();
    listener.beforeHandOver =
        record -> {
          if (!"R-2".equals(orderNo(record))) {
            return;
          }
          if (failNext.compareAndSet(true, false)) {
            thrown.set(true);
            throw new OutOfMemoryError("Java heap space");
          }
          if (secondHandedOver.getCount() > 0) {
            // Held until R-1's handler runs, so that the worker takes R-1 in a batch of its own.
            awaitQuietly(firstRunning);
            secondHandedOver.countDown();
          }
        };
    listener.beforeWorkerReplaced = () -> failNext.set(true);

    // Both there before the container's first poll, which takes them together.
    sendOrder(REPLACED, "R-1");
    sendOrder(REPLACED, "R-2");
    registry.getListenerContainer(REPLACED).start();
    awaitAppliedOnceAndAccepted(applied, WAIT, REPLACED, "R-1", "R-2");
    assertThat(thrown).as("the hand-over of R-2 to the new worker threw").isTrue();
  }

  /**
   * The keeper's acknowledgement of a decided record throws once: the user sees it accepted, and
   * the record sent after it applied. Before the fix the record was forgotten unacknowledged, and
   * its consumer, which polls only once every record of its last poll is acknowledged, received
   * nothing more.
   */
  @Test
  void aRecordWhoseAcknowledgementThrowsIsAcknowledgedAgainAndTheConsumerGoesOn() throws Exception {
    AtomicBoolean failed = new AtomicBoolean();
    listener(ACKNOWLEDGED).beforeAcknowledge =
        record -> {
          if ("A-1".equals(orderNo(record)) && failed.compareAndSet(false, true)) {
            throw new OutOfMemoryError("Java heap space");
          }
        };

    sendOrder(ACKNOWLEDGED, "A-1");
    await().atMost(WAIT).until(failed::get);
    sendOrder(ACKNOWLEDGED, "A-2");
    awaitAppliedOnceAndAccepted(applied, WAIT, ACKNOWLEDGED, "A-1", "A-2");
  }

  /**
   * The keeper's renewal of a record's lock throws once, while its handler runs: the user sees the
   * record accepted, and the record sent after it applied. Before the fix the record was taken as
   * out for renewal, unacknowledged, and its consumer received nothing more.
   */
  @Test
  void aRecordWhoseRenewalThrowsIsRenewedAgainAndTheConsumerGoesOn() throws Exception {
    listener(RENEWED).beforeAcknowledge =
        record -> {
          if ("N-1".equals(orderNo(record)) && renewalFailed.getCount() > 0) {
            renewalFailed.countDown();
            throw new OutOfMemoryError("Java heap space");
          }
        };

    sendOrder(RENEWED, "N-1");
    assertThat(renewalFailed.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();
    sendOrder(RENEWED, "N-2");
    awaitAppliedOnceAndAccepted(applied, WAIT, RENEWED, "N-1", "N-2");
  }

  /**
   * The keeper takes in the worker's decision for a record whose listener returned, and that throws
   * once (an {@code OutOfMemoryError}): the user sees the record accepted, and the record sent
   * after it applied. Before the fix the decision was lost: the record was renewed for good, never
   * acknowledged, and its consumer, holding it, fetched nothing more.
   */
  @Test
  void aDecisionWhoseTakingInThrowsIsTakenInAgainAndTheConsumerGoesOn() throws Exception {
    AtomicBoolean failed = new AtomicBoolean();
    listener(DECIDED).beforeDecide =
        decided -> {
          if (failed.compareAndSet(false, true)) {
            throw new OutOfMemoryError("Java heap space");
          }
        };

    sendOrder(DECIDED, "D-1");
    await().atMost(WAIT).until(failed::get);
    sendOrder(DECIDED, "D-2");
    awaitAppliedOnceAndAccepted(applied, WAIT, DECIDED, "D-1", "D-2");
  }

  /**
   * The keeper's taking-in of the decision for a record whose listener returned throws on every try
   * for a while (an exception): the user sees a few tries, not a core kept busy by tries and ERROR
   * lines in a loop, then, once it no longer throws, the record accepted, applied once and not
   * delivered again, and the record sent after it applied. Before the fix the keeper took the
   * decision it had queued again straight back: thousands of tries and ERROR lines a second.
   */
  @Test
  void aDecisionWhoseTakingInThrowsForAWhileIsTriedAgainAfterABackOff() throws Exception {
    decisionFailingForAWhile(DECIDED_FAILING, "F", () -> new IllegalStateException("Queue full"));
  }

  /** As above, the taking-in throwing an {@code Error} (an {@code OutOfMemoryError}) each time. */
  @Test
  void aDecisionWhoseTakingInThrowsAnErrorForAWhileIsTriedAgainAfterABackOff() throws Exception {
    decisionFailingForAWhile(
        DECIDED_FAILING_ERROR, "G", () -> new OutOfMemoryError("Java heap space"));
  }

  /** Orders {@code <prefix>-1} and {@code <prefix>-2} to {@code listenerId}. */
  private void decisionFailingForAWhile(
      String listenerId, String prefix, Supplier<? extends Throwable> failure) throws Exception {
    String first = prefix + "-1";
    String second = prefix + "-2";
    Duration failing = LOCK.plus(Duration.ofSeconds(1));
    DedupShareListener<?, ?> listener = listener(listenerId);
    AtomicBoolean fail = new AtomicBoolean(true);
    AtomicInteger tries = new AtomicInteger();
    listener.beforeDecide =
        decided -> {
          if (fail.get()) {
            tries.incrementAndGet();
            Throwable thrown = failure.get();
            if (thrown instanceof Error error) {
              throw error;
            }
            throw (RuntimeException) thrown;
          }
        };
    // The deliveries handed to the worker, by order number: a record given back and delivered
    // again comes with a higher count.
    Map<String, List<Integer>> deliveries = new ConcurrentHashMap<>();
    listener.beforeHandOver =
        record ->
            deliveries
                .computeIfAbsent(orderNo(record), k -> new CopyOnWriteArrayList<>())
                .add(record.deliveryCount().map(Short::intValue).orElse(0));

    sendOrder(listenerId, first);
    await().atMost(WAIT).alias("the taking-in threw").until(() -> tries.get() > 0);
    Thread.sleep(failing.toMillis());
    int triesWhileFailing = tries.get();
    fail.set(false);

    sendOrder(listenerId, second);
    awaitAppliedOnceAndAccepted(applied, WAIT, listenerId, first, second);
    // One try a third of the lock (1 s) would be 5 in these 4 s.
    assertThat(triesWhileFailing)
        .as("tries to take in %s's decision within %s of its first failure", first, failing)
        .isBetween(2, 10);
    assertThat(deliveries).as("deliveries handed to the worker").containsEntry(first, List.of(1));
  }

  /**
   * S-1 and S-2 come in one poll; S-1's listener returns, S-2's throws a {@code
   * StackOverflowError}, which ends the worker, while taking in S-1's decision throws: the keeper
   * replaces the worker with S-1's decision set aside. The user sees S-1 run once, handed to no
   * second worker, and accepted once its decision is taken in; S-2 applied on its next delivery.
   */
  @Test
  void aRecordWhoseDecisionIsSetAsideIsNotHandedToTheWorkerReplacingOneAnErrorEnded()
      throws Exception {
    DedupShareListener<?, ?> listener = listener(SET_ASIDE);
    AtomicBoolean fail = new AtomicBoolean(true);
    AtomicInteger tries = new AtomicInteger();
    listener.beforeDecide =
        decided -> {
          if (decided.offset() == 0 && fail.get()) { // S-1, the topic's first record
            tries.incrementAndGet();
            throw new OutOfMemoryError("Java heap space");
          }
        };
    AtomicBoolean replaced = new AtomicBoolean();
    listener.beforeWorkerReplaced = () -> replaced.set(true);
    Map<String, List<Integer>> deliveries = new ConcurrentHashMap<>();
    listener.beforeHandOver =
        record ->
            deliveries
                .computeIfAbsent(orderNo(record), k -> new CopyOnWriteArrayList<>())
                .add(record.deliveryCount().map(Short::intValue).orElse(0));

    // Both there before the container's first poll, which takes them together.
    sendOrder(SET_ASIDE, "S-1");
    sendOrder(SET_ASIDE, "S-2");
    registry.getListenerContainer(SET_ASIDE).start();
    await().atMost(WAIT).alias("the worker replaced").until(replaced::get);
    assertThat(tries).as("tries to take in S-1's decision").hasPositiveValue();
    fail.set(false);

    awaitAppliedOnceAndAccepted(applied, WAIT, SET_ASIDE, "S-1", "S-2");
    assertThat(deliveries.get("S-1")).as("S-1 handed to a worker").containsExactly(1);
    assertThat(setAsideRuns).as("listener runs of S-1").hasValue(1);
  }

  private DedupShareListener<?, ?> listener(String listenerId) {
    return (DedupShareListener<?, ?>)
        registry.getListenerContainer(listenerId).getContainerProperties().getMessageListener();
  }

  /** Returns whether the failure was thrown. */
  private AtomicBoolean failFirstHandOver(
      String listenerId, Supplier<? extends Throwable> failure) {
    AtomicBoolean failed = new AtomicBoolean();
    listener(listenerId).beforeHandOver =
        record -> {
          if (failed.compareAndSet(false, true)) {
            Throwable thrown = failure.get();
            if (thrown instanceof Error error) {
              throw error;
            }
            throw (RuntimeException) thrown;
          }
        };
    return failed;
  }

  private static void awaitQuietly(CountDownLatch latch) {
    try {
      latch.await(WAIT.toSeconds(), TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.groupShareFactory(ERROR);
    }

    @Bean
    Listeners listeners() {
      return new Listeners();
    }

    @EventListener
    void stopped(ConsumerStoppedEvent event) {
      MessageListenerContainer container = event.getContainer(MessageListenerContainer.class);
      if (ERROR.equals(container.getListenerId())) {
        errorContainerStops.add(event.getReason());
      }
    }
  }

  static class Listeners {
    @Idempotent(bizType = "hand-over-renewed", header = "order-no")
    @KafkaListener(
        id = RENEWED,
        topics = RENEWED,
        groupId = RENEWED,
        containerFactory = "shareFactory")
    public void renewed(ConsumerRecord<String, String> record) throws InterruptedException {
      if ("N-1".equals(orderNo(record))) {
        // Runs until a renewal of its lock has been tried, and failed.
        renewalFailed.await(WAIT.toSeconds(), TimeUnit.SECONDS);
      }
      apply(applied, record);
    }

    @Idempotent(bizType = "hand-over-acknowledged", header = "order-no")
    @KafkaListener(
        id = ACKNOWLEDGED,
        topics = ACKNOWLEDGED,
        groupId = ACKNOWLEDGED,
        containerFactory = "shareFactory")
    @KafkaListener(
        id = DECIDED,
        topics = DECIDED,
        groupId = DECIDED,
        containerFactory = "shareFactory")
    @KafkaListener(
        id = DECIDED_FAILING,
        topics = DECIDED_FAILING,
        groupId = DECIDED_FAILING,
        containerFactory = "shareFactory")
    @KafkaListener(
        id = DECIDED_FAILING_ERROR,
        topics = DECIDED_FAILING_ERROR,
        groupId = DECIDED_FAILING_ERROR,
        containerFactory = "shareFactory")
    public void acknowledged(ConsumerRecord<String, String> record) {
      apply(applied, record);
    }

    private final AtomicBoolean firstCallOfR1 = new AtomicBoolean(true);

    private final AtomicBoolean firstCallOfS2 = new AtomicBoolean(true);

    @Idempotent(bizType = "hand-over-set-aside", header = "order-no")
    @KafkaListener(
        id = SET_ASIDE,
        topics = SET_ASIDE,
        groupId = SET_ASIDE,
        containerFactory = "shareFactory",
        autoStartup = "false")
    public void setAside(ConsumerRecord<String, String> record) {
      if ("S-1".equals(orderNo(record))) {
        setAsideRuns.incrementAndGet();
      }
      if ("S-2".equals(orderNo(record)) && firstCallOfS2.getAndSet(false)) {
        throw new StackOverflowError("deep recursion in the handler");
      }
      apply(applied, record);
    }

    @Idempotent(bizType = "hand-over-error", header = "order-no")
    @KafkaListener(id = ERROR, topics = ERROR, groupId = ERROR, containerFactory = "shareFactory")
    public void error(ConsumerRecord<String, String> record) {
      apply(applied, record);
    }

    @Idempotent(bizType = "hand-over-exception", header = "order-no")
    @KafkaListener(
        id = EXCEPTION,
        topics = EXCEPTION,
        groupId = EXCEPTION,
        containerFactory = "shareFactory")
    public void exception(ConsumerRecord<String, String> record) {
      apply(applied, record);
    }

    @Idempotent(bizType = "hand-over-replaced", header = "order-no")
    @KafkaListener(
        id = REPLACED,
        topics = REPLACED,
        groupId = REPLACED,
        containerFactory = "shareFactory",
        autoStartup = "false")
    public void replaced(ConsumerRecord<String, String> record) throws InterruptedException {
      if ("R-1".equals(orderNo(record)) && firstCallOfR1.getAndSet(false)) {
        firstRunning.countDown();
        // R-2 is handed over behind this batch, undecided when the Error ends the worker.
        if (!secondHandedOver.await(WAIT.toSeconds(), TimeUnit.SECONDS)) {
          throw new IllegalStateException("R-2 was not handed over");
        }
        throw new StackOverflowError("deep recursion in the handler");
      }
      apply(applied, record);
    }
  }
}
