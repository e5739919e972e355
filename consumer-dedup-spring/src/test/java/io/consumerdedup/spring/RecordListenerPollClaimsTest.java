package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.beans.factory.support.AbstractBeanDefinition;
import org.springframework.beans.factory.support.BeanDefinitionRegistryPostProcessor;
import org.springframework.beans.factory.support.RootBeanDefinition;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.ConcurrentKafkaListenerContainerFactoryConfigurer;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.ContainerProperties.AckMode;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.messaging.handler.annotation.Payload;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * {@code @Idempotent} record listeners at the Boot defaults claim each poll's keys in one statement
 * and have their SUCCESS marks written in the background, in groups: statements counted on the
 * application's DataSource, polls counted by a Kafka consumer interceptor, offsets read from the
 * broker. Every guarantee of the per-record path holds record by record: a mark the database
 * refuses (a trigger raising a serialization failure on that key's SUCCESS) keeps every ack mode
 * from committing past its record; a key in progress elsewhere in the middle of a poll is held and
 * the claims after it given back; a failure is retried; a consumer that is thrown out of its group
 * in the middle of a poll leaves nothing applied twice; an {@code Error} gives back the poll's
 * claims; a record applied through two {@code @Idempotent} methods is not committed past until the
 * marks of both are written; a replay's commit cut at a mark not written is committed in full once
 * it is; ack modes COUNT and TIME, whose acknowledgments wait in the container, commit at a
 * rebalance what is done, never past a mark not written. A real PostgreSQL and the in-JVM broker.
 */
@SpringBootTest(classes = RecordListenerPollClaimsTest.App.class)
@DirtiesContext
class RecordListenerPollClaimsTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String MAIN = "pc-main";
  static final String HELD = "pc-held";
  static final String FLAKY = "pc-flaky";
  static final String ERROR = "pc-error";
  static final String ASYNC = "pc-async";
  static final String ORDER_AND_INVOICE = "pc-order-invoice";
  static final String REPLAY = "pc-replay";
  static final String REBALANCE = "pc-rebalance";
  static final String ACK = "pc-ack-";
  static final String ACK_REBALANCE = "pc-ackreb-";
  static final List<AckMode> RARE_COMMITS = List.of(AckMode.COUNT, AckMode.TIME);
  static String schema;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    List<String> topics =
        new ArrayList<>(List.of(MAIN, HELD, FLAKY, ERROR, ASYNC, ORDER_AND_INVOICE, REPLAY));
    for (AckMode mode : AckMode.values()) {
      topics.add(ACK + mode);
    }
    schema = SpringTestEnvironment.prepare(registry, "poll_claims", topics.toArray(String[]::new));
    TestKafka.createTopics(2, REBALANCE);
    for (AckMode mode : RARE_COMMITS) {
      TestKafka.createTopics(2, ACK_REBALANCE + mode);
    }
    // The database refuses the SUCCESS of the keys listed, as a transient failure.
    SpringTestEnvironment.refuseListedSuccesses(schema);
    registry.add("consumer-dedup.store.retry-max-attempts", () -> "1");
    registry.add("consumer-dedup.hold.initial-backoff", () -> "200ms");
    registry.add("consumer-dedup.hold.max-backoff", () -> "1s");
    registry.add(
        "spring.kafka.consumer.properties.interceptor.classes", PollCounter.class::getName);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired StatementCounter statements;
  @Autowired DedupStore store;
  @Autowired MeterRegistry registry;
  @Autowired KafkaListenerEndpointRegistry containers;
  @Autowired ConsumerFactory<Object, Object> consumerFactory;

  @Test
  void aPollsKeysAreClaimedInOneStatementAndEachRecordIsAppliedOnceWithDuplicatesMixedIn()
      throws Exception {
    assertThat(((DefaultKafkaConsumerFactory<Object, Object>) consumerFactory).getPostProcessors())
        .contains(DedupConsumerPostProcessor.INSTANCE);
    for (int i = 0; i < 50; i++) {
      send(MAIN, "M-" + i);
    }
    await().atMost(WAIT).until(() -> Listeners.mainEffects.size() == 50);

    MessageListenerContainer container = containers.getListenerContainer(MAIN);
    container.pause();
    await().atMost(WAIT).until(container::isContainerPaused);
    StatementCounter.Counts before = statements.now();
    int pollsBefore = PollCounter.polls(MAIN);
    double duplicatesBefore = outcomes("main", "duplicate");
    for (int i = 0; i < 100; i++) {
      send(MAIN, "N-" + i);
      if (i % 2 == 0) {
        send(MAIN, "M-" + i / 2); // applied before: a duplicate
      }
    }
    container.resume();
    await()
        .atMost(WAIT)
        .until(
            () ->
                Listeners.mainEffects.keySet().stream().filter(k -> k.startsWith("N-")).count()
                    == 100);
    await().atMost(WAIT).until(() -> outcomes("main", "duplicate") - duplicatesBefore == 50);

    StatementCounter.Counts used = statements.now().since(before);
    int polls = PollCounter.polls(MAIN) - pollsBefore;
    assertThat(polls).as("polls of 150 records").isBetween(1, 5);
    assertThat(used.claims()).as("claim statements, %d polls", polls).isEqualTo(polls);
    // The handler takes microseconds: marks gather while one statement is on its way.
    assertThat(used.marks()).as("SUCCESS mark statements for 100 records").isLessThan(50);
    assertThat(used.releases()).isZero();
    for (int i = 0; i < 100; i++) {
      assertThat(Listeners.mainEffects.get("N-" + i).get()).as("N-" + i).isEqualTo(1);
    }
    for (int i = 0; i < 50; i++) {
      assertThat(Listeners.mainEffects.get("M-" + i).get()).as("M-" + i).isEqualTo(1);
    }
    // The offsets are committed only behind durable SUCCESS marks, so no claim is left after.
    await().atMost(WAIT).until(() -> committed(MAIN, MAIN, 0) == 200);
    assertThat(processing("main")).isZero();
  }

  /**
   * Whatever the ack mode (every mode at once, a container each), a record whose SUCCESS the
   * database refuses is not committed past while the records after it are applied and their marks
   * written; once the database takes the mark, the record comes again as a duplicate and everything
   * is committed.
   */
  @Test
  void noAckModeCommitsPastARecordWhoseMarkIsNotWritten() throws Exception {
    List<AckMode> modes = List.of(AckMode.values());
    for (AckMode mode : modes) {
      SpringTestEnvironment.refuseSuccessOf(jdbc, mode + "-3");
      containers.getListenerContainer(ACK + mode).pause();
    }
    try {
      for (AckMode mode : modes) {
        MessageListenerContainer container = containers.getListenerContainer(ACK + mode);
        await().atMost(WAIT).until(container::isContainerPaused);
        for (int i = 0; i < 10; i++) {
          send(ACK + mode, mode + "-" + i);
        }
      }
      // One poll each: the records after the refused one are in hand.
      modes.forEach(mode -> containers.getListenerContainer(ACK + mode).resume());
      for (AckMode mode : modes) {
        await().atMost(WAIT).until(() -> effects(mode + "-9") == 1);
        await()
            .atMost(WAIT)
            .until(() -> SpringTestEnvironment.refusedSuccessesOf(jdbc, mode + "-3") > 0);
        await().atMost(WAIT).until(() -> status(ACK + mode, mode + "-8") == DedupStatus.SUCCESS);
      }
      // The records after it are applied, their marks written, the consumers commit again and
      // again: never past the refused record (offset 3).
      Map<AckMode, Long> highest = new EnumMap<>(AckMode.class);
      long end = System.nanoTime() + Duration.ofSeconds(3).toNanos();
      while (System.nanoTime() < end) {
        for (AckMode mode : modes) {
          highest.merge(mode, committed(ACK + mode, ACK + mode, 0), Math::max);
        }
        Thread.sleep(100);
      }
      for (AckMode mode : modes) {
        assertThat(highest.get(mode))
            .as("%s: committed while the SUCCESS of offset 3 is refused", mode)
            .isLessThan(4);
        assertThat(status(ACK + mode, mode + "-3"))
            .as(mode.name())
            .isEqualTo(DedupStatus.PROCESSING);
      }
    } finally {
      jdbc.update("DELETE FROM mark_faults");
    }
    for (AckMode mode : modes) {
      await().atMost(WAIT).until(() -> committed(ACK + mode, ACK + mode, 0) == 10);
      for (int i = 0; i < 10; i++) {
        assertThat(effects(mode + "-" + i)).as(mode + "-" + i).isEqualTo(1);
        assertThat(status(ACK + mode, mode + "-" + i)).isEqualTo(DedupStatus.SUCCESS);
      }
    }
  }

  /**
   * A listener applies each record as an order and as an invoice, through the {@code @Idempotent}
   * listener methods of the orders' and the invoices' beans, one per biz type. The invoice was
   * applied with an earlier record (a duplicate), the order is new and its SUCCESS refused: no
   * commit passes the record until the order's mark is written; then the order is applied once.
   */
  @Test
  void aRecordWhoseSecondIdempotentMethodFindsADuplicateIsNotCommittedPastTheFirstsMark()
      throws Exception {
    long first = sendOrderAndInvoice("O-1", "I-1");
    await().atMost(WAIT).until(() -> committed(ORDER_AND_INVOICE, ORDER_AND_INVOICE, 0) > first);
    double duplicatesBefore = outcomes("invoice", "duplicate");

    notCommittedPastWhileTheOrderIsRefused("O-2", "I-1");

    assertThat(outcomes("invoice", "duplicate") - duplicatesBefore)
        .as("the invoice of the second record found applied")
        .isEqualTo(1);
    assertThat(OrderAndInvoiceListener.invoices.get("I-1")).as("invoice I-1").hasValue(1);
  }

  /**
   * As above, the invoice new too: its mark, written, does not stand in for the order's, refused.
   */
  @Test
  void aRecordWhoseTwoIdempotentMethodsAreBothNewIsNotCommittedPastEitherMark() throws Exception {
    notCommittedPastWhileTheOrderIsRefused("O-3", "I-3");

    assertThat(OrderAndInvoiceListener.invoices.get("I-3")).as("invoice I-3").hasValue(1);
    assertThat(status("invoice", "I-3")).isEqualTo(DedupStatus.SUCCESS);
  }

  /**
   * Sends a record of {@code order} and {@code invoice}, the order's SUCCESS refused: while it is,
   * the invoice settled, the consumer committing again and again, the committed offset stays at the
   * record; once the database takes the mark, it passes the record, the order applied once.
   */
  private void notCommittedPastWhileTheOrderIsRefused(String order, String invoice)
      throws Exception {
    SpringTestEnvironment.refuseSuccessOf(jdbc, order);
    long offset;
    try {
      offset = sendOrderAndInvoice(order, invoice);
      await().atMost(WAIT).until(() -> SpringTestEnvironment.refusedSuccessesOf(jdbc, order) > 0);
      await().atMost(WAIT).until(() -> status("invoice", invoice) == DedupStatus.SUCCESS);
      long highest = -1;
      long end = System.nanoTime() + Duration.ofSeconds(3).toNanos();
      while (System.nanoTime() < end) {
        highest = Math.max(highest, committed(ORDER_AND_INVOICE, ORDER_AND_INVOICE, 0));
        Thread.sleep(100);
      }
      assertThat(highest)
          .as("committed while the SUCCESS of order %s (offset %d) is refused", order, offset)
          .isLessThanOrEqualTo(offset);
      assertThat(status("order", order)).isEqualTo(DedupStatus.PROCESSING);
    } finally {
      jdbc.update("DELETE FROM mark_faults");
    }
    await()
        .atMost(WAIT)
        .until(() -> committed(ORDER_AND_INVOICE, ORDER_AND_INVOICE, 0) == offset + 1);
    assertThat(status("order", order)).isEqualTo(DedupStatus.SUCCESS);
    assertThat(OrderAndInvoiceListener.orders.get(order)).as("order " + order).hasValue(1);
  }

  private long sendOrderAndInvoice(String order, String invoice) throws Exception {
    return SpringTestEnvironment.send(
        template,
        ORDER_AND_INVOICE,
        order + " " + invoice,
        "order-no",
        order,
        "invoice-no",
        invoice);
  }

  /**
   * The application replays a partition it had consumed to its end (its rows deleted, it seeks back
   * to the first record from its listener); the SUCCESS of one replayed record is refused, so the
   * container's commit of the replay is cut there. Once the database takes the mark, the rest is
   * committed: the lag reaches zero without waiting for another record.
   */
  @Test
  void aReplayCommitCutAtAMarkNotWrittenIsCommittedInFullOnceItIsWritten() throws Exception {
    for (int i = 0; i < 10; i++) {
      send(REPLAY, "RP-" + i);
    }
    await().atMost(WAIT).until(() -> committed(REPLAY, REPLAY, 0) == 10);
    jdbc.update("DELETE FROM consumer_dedup WHERE biz_type = 'replay'");
    SpringTestEnvironment.refuseSuccessOf(jdbc, "RP-7");
    try {
      long trigger =
          SpringTestEnvironment.send(
              template, REPLAY, "replay", "order-no", "RP-replay", "replay", "from 0");
      await().atMost(WAIT).until(() -> ReplayListener.applied.get("RP-9").get() == 2);
      await().atMost(WAIT).until(() -> SpringTestEnvironment.refusedSuccessesOf(jdbc, "RP-7") > 0);
      assertThat(trigger).isEqualTo(10);
      // The replay's commit (of 11) is cut at the refused record, or before it while the marks
      // written with it are on their way.
      await().atMost(WAIT).until(() -> committed(REPLAY, REPLAY, 0) < 11);
      for (int i = 0; i < 10; i++) {
        if (i != 7) {
          String orderNo = "RP-" + i;
          await().atMost(WAIT).until(() -> status("replay", orderNo) == DedupStatus.SUCCESS);
        }
      }
      assertThat(committed(REPLAY, REPLAY, 0)).isLessThanOrEqualTo(7);
    } finally {
      jdbc.update("DELETE FROM mark_faults");
    }
    await().atMost(WAIT).until(() -> status("replay", "RP-7") == DedupStatus.SUCCESS);
    long end = System.nanoTime() + Duration.ofSeconds(10).toNanos();
    while (System.nanoTime() < end && committed(REPLAY, REPLAY, 0) != 11) {
      Thread.sleep(100);
    }
    assertThat(committed(REPLAY, REPLAY, 0))
        .as("committed 10 s after the mark that cut the replay's commit was written")
        .isEqualTo(11);
    for (int i = 0; i < 10; i++) {
      assertThat(ReplayListener.applied.get("RP-" + i)).as("RP-" + i + ", replayed").hasValue(2);
    }
  }

  /**
   * Ack modes COUNT and TIME keep the acknowledgments of done records in the container until enough
   * records or time have passed; a second consumer joins the group and takes a partition over. The
   * container commits what it holds as the partitions are revoked, and the consumer what it owes:
   * up to a SUCCESS mark the database refuses on one partition, and all of the other. The new
   * owners read no record again but from the refused one, which waits until its mark is written and
   * then comes as a duplicate; nothing is applied twice. Stopped, the containers commit the rest.
   */
  @Test
  void countAndTimeAckModesCommitAtARebalanceUpToTheFirstMarkNotWritten() throws Exception {
    Map<AckMode, Double> duplicatesBefore = new EnumMap<>(AckMode.class);
    for (AckMode mode : RARE_COMMITS) {
      MessageListenerContainer a = containers.getListenerContainer(ACK_REBALANCE + mode + "-a");
      await().atMost(WAIT).until(() -> a.getAssignedPartitions().size() == 2);
      SpringTestEnvironment.refuseSuccessOf(jdbc, mode + "-P0-3");
      duplicatesBefore.put(mode, outcomes(ACK_REBALANCE + mode, "duplicate"));
    }
    try {
      for (AckMode mode : RARE_COMMITS) {
        for (int partition = 0; partition < 2; partition++) {
          for (int i = 0; i < 10; i++) {
            String orderNo = mode + "-P" + partition + "-" + i;
            ProducerRecord<String, String> record =
                new ProducerRecord<>(
                    ACK_REBALANCE + mode, partition, null, "payload of " + orderNo);
            record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
            template.send(record).get();
          }
        }
      }
      for (AckMode mode : RARE_COMMITS) {
        await().atMost(WAIT).until(() -> applied(mode + "-P") == 20);
        await()
            .atMost(WAIT)
            .until(() -> SpringTestEnvironment.refusedSuccessesOf(jdbc, mode + "-P0-3") > 0);
        await()
            .atMost(WAIT)
            .until(
                () ->
                    status(ACK_REBALANCE + mode, mode + "-P0-9") == DedupStatus.SUCCESS
                        && status(ACK_REBALANCE + mode, mode + "-P1-9") == DedupStatus.SUCCESS);
        containers.getListenerContainer(ACK_REBALANCE + mode + "-b").start();
      }
      for (AckMode mode : RARE_COMMITS) {
        MessageListenerContainer b = containers.getListenerContainer(ACK_REBALANCE + mode + "-b");
        await().atMost(WAIT).until(() -> !b.getAssignedPartitions().isEmpty());
        await()
            .atMost(WAIT)
            .until(() -> committed(ACK_REBALANCE + mode, ACK_REBALANCE + mode, 1) == 10);
      }
      // The partitions are settled with their new owners: none commits past the refused record,
      // and none reads a record it holds as done again (each would be a duplicate).
      Map<AckMode, Long> highest = new EnumMap<>(AckMode.class);
      long end = System.nanoTime() + Duration.ofSeconds(2).toNanos();
      while (System.nanoTime() < end) {
        for (AckMode mode : RARE_COMMITS) {
          highest.merge(mode, committed(ACK_REBALANCE + mode, ACK_REBALANCE + mode, 0), Math::max);
        }
        Thread.sleep(100);
      }
      for (AckMode mode : RARE_COMMITS) {
        assertThat(highest.get(mode))
            .as("%s: committed offset of partition 0, the SUCCESS of offset 3 refused", mode)
            .isEqualTo(3);
        assertThat(outcomes(ACK_REBALANCE + mode, "duplicate") - duplicatesBefore.get(mode))
            .as("%s: records read again by their new owner, done before the rebalance", mode)
            .isZero();
        assertThat(status(ACK_REBALANCE + mode, mode + "-P0-3")).isEqualTo(DedupStatus.PROCESSING);
      }
    } finally {
      jdbc.update("DELETE FROM mark_faults");
    }
    for (AckMode mode : RARE_COMMITS) {
      // Offset 3 comes again once its mark is written, and the records after it with it.
      await()
          .atMost(WAIT)
          .until(
              () -> outcomes(ACK_REBALANCE + mode, "duplicate") - duplicatesBefore.get(mode) == 7);
    }
    // Stopped, each container commits the acknowledgments it holds (a minute or 1000 records
    // early): the second consumer's, then the first's, which takes both partitions over meanwhile.
    for (AckMode mode : RARE_COMMITS) {
      containers.getListenerContainer(ACK_REBALANCE + mode + "-b").stop();
      containers.getListenerContainer(ACK_REBALANCE + mode + "-a").stop();
    }
    for (AckMode mode : RARE_COMMITS) {
      for (int partition = 0; partition < 2; partition++) {
        assertThat(committed(ACK_REBALANCE + mode, ACK_REBALANCE + mode, partition))
            .as("%s: committed offset of partition %d, the containers stopped", mode, partition)
            .isEqualTo(10);
        for (int i = 0; i < 10; i++) {
          String orderNo = mode + "-P" + partition + "-" + i;
          assertThat(effects(orderNo)).as(orderNo).isEqualTo(1);
          assertThat(status(ACK_REBALANCE + mode, orderNo)).isEqualTo(DedupStatus.SUCCESS);
        }
      }
      assertThat(outcomes(ACK_REBALANCE + mode, "duplicate") - duplicatesBefore.get(mode))
          .as("%s: records read again, offset 3 and the seven after it", mode)
          .isEqualTo(7);
    }
  }

  /**
   * A key another consumer holds, in the middle of a poll: the records before it are applied, it is
   * held (its partition sought back and paused), the claims of the records after it are given back
   * rather than left PROCESSING, and once the holder lets go everything is applied once.
   */
  @Test
  void aKeyInProgressInTheMiddleOfAPollIsHeldAndTheClaimsAfterItAreGivenBack() throws Exception {
    try (HikariDataSource otherPool = pool(TestDatabase.url(schema));
        IdempotentExecutor other =
            IdempotentExecutor.builder(JdbcDedupStore.builder(otherPool).build())
                .ownerId("other-consumer")
                .lease(Duration.ofSeconds(60))
                .build()) {
      DedupClaim holder = other.claim(DedupKey.of("held", "H-5"), null, "other consumer");
      MessageListenerContainer container = containers.getListenerContainer(HELD);
      container.pause();
      await().atMost(WAIT).until(container::isContainerPaused);
      int releasesBefore = statements.releases.get();
      for (int i = 0; i <= 10; i++) {
        send(HELD, "H-" + i);
      }
      container.resume();
      await().atMost(WAIT).until(() -> applied("H-") == 5);
      await().atMost(WAIT).until(() -> statements.releases.get() > releasesBefore);
      for (int round = 0; round < 10; round++) {
        // Held: nothing after it applied or left PROCESSING by this consumer (the keys before it
        // are applied; their SUCCESS marks may still be on their way). Each retry of the held
        // record polls the records after it again and claims them with it, so a look may catch
        // those claims before they are given back; given back they must be, long before a lease.
        assertThat(applied("H-")).isEqualTo(5);
        await()
            .atMost(Duration.ofSeconds(5))
            .until(
                () ->
                    jdbc.queryForObject(
                        "SELECT count(*) FROM consumer_dedup WHERE status = 'PROCESSING'"
                            + " AND biz_type = 'held'"
                            + " AND biz_key IN ('H-6', 'H-7', 'H-8', 'H-9', 'H-10')",
                        Integer.class),
                count -> count == 0);
        assertThat(committed(HELD, HELD, 0)).isLessThanOrEqualTo(5);
        Thread.sleep(200);
      }
      assertThat(outcomes("held", "in_progress")).isGreaterThan(1);
      holder.fail(new IllegalStateException("the other consumer gave up"));
    }
    await().atMost(WAIT).until(() -> applied("H-") == 11);
    for (int i = 0; i <= 10; i++) {
      assertThat(effects("H-" + i)).as("H-" + i).isEqualTo(1);
    }
    await().atMost(WAIT).until(() -> committed(HELD, HELD, 0) == 11);
    assertThat(processing("held")).isZero();
  }

  @Test
  void aFailingRecordInTheMiddleOfAPollIsRetriedByTheErrorHandlerAndAppliedOnce() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(FLAKY);
    container.pause();
    await().atMost(WAIT).until(container::isContainerPaused);
    StatementCounter.Counts before = statements.now();
    int pollsBefore = PollCounter.polls(FLAKY);
    for (int i = 0; i < 10; i++) {
      send(FLAKY, "F-" + i);
    }
    container.resume();
    await().atMost(WAIT).until(() -> applied("F-") == 10);
    // The offsets are committed only behind durable SUCCESS marks: then every mark is written.
    await().atMost(WAIT).until(() -> committed(FLAKY, FLAKY, 0) == 10);
    for (int i = 0; i < 10; i++) {
      assertThat(effects("F-" + i)).as("F-" + i).isEqualTo(1);
      DedupRecord record = store.find(DedupKey.of("flaky", "F-" + i)).orElseThrow();
      assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
      assertThat(record.attempts()).as("attempts of F-" + i).isEqualTo(i == 4 ? 2 : 1);
    }
    assertThat(Listeners.calls.get("F-4")).isEqualTo(2);
    // Per poll; and after the failure, the failed record alone when it came again, then the
    // records after it together.
    StatementCounter.Counts used = statements.now().since(before);
    assertThat(used.claims()).isLessThanOrEqualTo(PollCounter.polls(FLAKY) - pollsBefore + 1);
    assertThat(used.releases()).isLessThanOrEqualTo(1);
    assertThat(processing("flaky")).isZero();
  }

  /**
   * The listener throws an {@code Error} in the middle of a poll: spring-kafka stops the container;
   * the record is FAILED, the claims of the records after it are given back (none PROCESSING), and
   * a restart applies everything once.
   */
  @Test
  void anErrorInTheMiddleOfAPollGivesBackThePollsOtherClaims() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(ERROR);
    container.pause();
    await().atMost(WAIT).until(container::isContainerPaused);
    int releasesBefore = statements.releases.get();
    for (int i = 0; i < 10; i++) {
      send(ERROR, "E-" + i);
    }
    container.resume();
    await().atMost(WAIT).until(() -> !container.isRunning());
    assertThat(applied("E-")).isEqualTo(4);
    assertThat(status("error", "E-4")).isEqualTo(DedupStatus.FAILED);
    assertThat(statements.releases.get()).isGreaterThan(releasesBefore);
    for (int i = 5; i < 10; i++) {
      assertThat(store.find(DedupKey.of("error", "E-" + i))).as("E-" + i).isEmpty();
    }
    // The SUCCESS marks of the records before the Error may still be on their way when the
    // container reports it stopped; written they must be, long before their 5 min leases end.
    await().atMost(WAIT).until(() -> processing("error") == 0);

    container.start();
    await().atMost(WAIT).until(() -> applied("E-") == 10);
    for (int i = 0; i < 10; i++) {
      assertThat(effects("E-" + i)).as("E-" + i).isEqualTo(1);
    }
    await().atMost(WAIT).until(() -> committed(ERROR, ERROR, 0) == 10);
    assertThat(status("error", "E-4")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(processing("error")).isZero();
  }

  @Test
  void aListenerReturningAFutureClaimsPerPollAndItsMarksHoldBackTheCommit() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(ASYNC);
    container.pause();
    await().atMost(WAIT).until(container::isContainerPaused);
    StatementCounter.Counts before = statements.now();
    int pollsBefore = PollCounter.polls(ASYNC);
    for (int i = 0; i < 30; i++) {
      send(ASYNC, "A-" + i);
      if (i % 3 == 0) {
        send(ASYNC, "A-" + i); // a copy in the same poll: a duplicate
      }
    }
    container.resume();
    await().atMost(WAIT).until(() -> applied("A-") == 30);
    await().atMost(WAIT).until(() -> committed(ASYNC, ASYNC, 0) == 40);
    for (int i = 0; i < 30; i++) {
      assertThat(effects("A-" + i)).as("A-" + i).isEqualTo(1);
    }
    int polls = PollCounter.polls(ASYNC) - pollsBefore;
    // One per poll, and one for each later copy of a key within the poll.
    assertThat(statements.now().since(before).claims()).isLessThanOrEqualTo(polls + 10);
    assertThat(processing("async")).isZero();
  }

  /**
   * Consumer a blocks in the middle of a poll for longer than {@code max.poll.interval.ms}: Kafka
   * throws it out of the group and consumer b takes both partitions from the last commit, while a
   * still holds the claims of its poll and goes on with it once it wakes. b is told those keys are
   * in progress and holds them; each record is applied once.
   */
  @Test
  void aConsumerThrownOutOfItsGroupInTheMiddleOfAPollLeavesNothingAppliedTwice() throws Exception {
    MessageListenerContainer a = containers.getListenerContainer("pc-reb-a");
    await().atMost(WAIT).until(() -> !a.getAssignedPartitions().isEmpty());
    a.pause();
    await().atMost(WAIT).until(a::isContainerPaused);
    double inProgressBefore = outcomes("rebalance", "in_progress");
    for (int i = 0; i < 20; i++) {
      ProducerRecord<String, String> record =
          new ProducerRecord<>(REBALANCE, i % 2, null, "payload of R-" + i);
      record.headers().add("order-no", ("R-" + i).getBytes(StandardCharsets.UTF_8));
      template.send(record).get();
    }
    a.resume(); // one poll of both partitions' records
    await().atMost(WAIT).until(() -> Listeners.blocked.getCount() == 0);
    containers.getListenerContainer("pc-reb-b").start();
    await().atMost(WAIT).until(() -> applied("R-") == 20);
    await()
        .atMost(WAIT)
        .until(
            () ->
                committed(REBALANCE, REBALANCE, 0) == 10
                    && committed(REBALANCE, REBALANCE, 1) == 10);
    for (int i = 0; i < 20; i++) {
      assertThat(effects("R-" + i)).as("R-" + i).isEqualTo(1);
    }
    // The fault was real: b met a's claims of the poll a was thrown out in the middle of.
    assertThat(outcomes("rebalance", "in_progress")).isGreaterThan(inProgressBefore);
    assertThat(processing("rebalance")).isZero();
  }

  private static HikariDataSource pool(String url) {
    HikariDataSource pool = new HikariDataSource();
    pool.setJdbcUrl(url);
    pool.setMaximumPoolSize(2);
    return pool;
  }

  private void send(String topic, String orderNo) throws Exception {
    SpringTestEnvironment.send(template, topic, "payload of " + orderNo, "order-no", orderNo);
  }

  private int effects(String bizKey) {
    Integer count =
        jdbc.queryForObject(
            "SELECT count(*) FROM effects WHERE biz_key = ?", Integer.class, bizKey);
    return count == null ? 0 : count;
  }

  /** Keys with {@code prefix} applied at least once. */
  private int applied(String prefix) {
    Integer count =
        jdbc.queryForObject(
            "SELECT count(DISTINCT biz_key) FROM effects WHERE biz_key LIKE ?",
            Integer.class,
            prefix + "%");
    return count == null ? 0 : count;
  }

  private int processing(String bizType) {
    Integer count =
        jdbc.queryForObject(
            "SELECT count(*) FROM consumer_dedup WHERE biz_type = ? AND status = 'PROCESSING'",
            Integer.class,
            bizType);
    return count == null ? 0 : count;
  }

  private DedupStatus status(String bizType, String bizKey) {
    return store.find(DedupKey.of(bizType, bizKey)).map(DedupRecord::status).orElse(null);
  }

  private static long committed(String group, String topic, int partition) throws Exception {
    return SpringTestEnvironment.committed(group, topic, partition);
  }

  private double outcomes(String bizType, String outcome) {
    return SpringTestEnvironment.outcomes(registry, bizType, outcome);
  }

  static void effect(JdbcTemplate jdbc, String listener, String orderNo) {
    SpringTestEnvironment.effect(jdbc, listener, orderNo, null);
  }

  static class Listeners {
    static final Map<String, Integer> calls = new ConcurrentHashMap<>();

    /** The main listener's effects, kept in memory so that it takes microseconds per record. */
    static final Map<String, AtomicInteger> mainEffects = new ConcurrentHashMap<>();

    static final java.util.concurrent.CountDownLatch blocked =
        new java.util.concurrent.CountDownLatch(1);
    private static final Set<String> erred = ConcurrentHashMap.newKeySet();
    private final ExecutorService async = Executors.newFixedThreadPool(2);
    private final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "main", header = "order-no")
    @KafkaListener(id = MAIN, topics = MAIN)
    void main(@Payload String payload, @Header("order-no") String orderNo) {
      mainEffects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
    }

    @Idempotent(bizType = "held", header = "order-no")
    @KafkaListener(id = HELD, topics = HELD)
    void held(String payload, @Header("order-no") String orderNo) {
      effect(jdbc, "held", orderNo);
    }

    @Idempotent(bizType = "flaky", header = "order-no")
    @KafkaListener(id = FLAKY, topics = FLAKY)
    void flaky(String payload, @Header("order-no") String orderNo) {
      if (calls.merge(orderNo, 1, Integer::sum) == 1 && orderNo.equals("F-4")) {
        throw new IllegalStateException("F-4 fails once");
      }
      effect(jdbc, "flaky", orderNo);
    }

    @Idempotent(bizType = "error", header = "order-no")
    @KafkaListener(id = ERROR, topics = ERROR)
    void error(String payload, @Header("order-no") String orderNo) {
      if (orderNo.equals("E-4") && erred.add(orderNo)) {
        throw new AssertionError("injected Error at E-4");
      }
      effect(jdbc, "error", orderNo);
    }

    @Idempotent(bizType = "async", key = "#headers['order-no']")
    @KafkaListener(id = ASYNC, topics = ASYNC)
    CompletableFuture<Void> async(String payload) {
      String orderNo = payload.substring("payload of ".length());
      return CompletableFuture.runAsync(() -> effect(jdbc, "async", orderNo), async);
    }

    @Idempotent(bizType = "rebalance", header = "order-no")
    @KafkaListener(
        id = "pc-reb-a",
        groupId = REBALANCE,
        topics = REBALANCE,
        properties = "max.poll.interval.ms=3000")
    void rebalanceA(String payload, @Header("order-no") String orderNo) throws Exception {
      if (orderNo.equals("R-6") && blocked.getCount() > 0) {
        blocked.countDown();
        Thread.sleep(8_000); // past max.poll.interval.ms: thrown out of the group meanwhile
      }
      effect(jdbc, "rebalance-a", orderNo);
    }

    @Idempotent(bizType = "rebalance", header = "order-no")
    @KafkaListener(id = "pc-reb-b", groupId = REBALANCE, topics = REBALANCE, autoStartup = "false")
    void rebalanceB(String payload, @Header("order-no") String orderNo) {
      effect(jdbc, "rebalance-b", orderNo);
    }
  }

  /**
   * A listener that applies each record as an order and as an invoice, each through the
   * {@code @Idempotent} listener method of another bean: the record's two keys are claimed with the
   * poll's and their marks written in the background.
   */
  static class OrderAndInvoiceListener {
    static final Map<String, AtomicInteger> orders = new ConcurrentHashMap<>();
    static final Map<String, AtomicInteger> invoices = new ConcurrentHashMap<>();
    private final Orders orderBook;
    private final Invoices invoiceBook;

    OrderAndInvoiceListener(Orders orderBook, Invoices invoiceBook) {
      this.orderBook = orderBook;
      this.invoiceBook = invoiceBook;
    }

    @KafkaListener(id = ORDER_AND_INVOICE, topics = ORDER_AND_INVOICE)
    void onRecord(String payload) {
      orderBook.onOrder(payload);
      invoiceBook.onInvoice(payload);
    }

    /** The order (0) or the invoice (1) number a payload of {@link #sendOrderAndInvoice} holds. */
    static String number(String payload, int which) {
      return payload.split(" ")[which];
    }
  }

  /** The listener of the orders topic, which {@link OrderAndInvoiceListener} calls too. */
  static class Orders {
    @Idempotent(bizType = "order", header = "order-no")
    @KafkaListener(id = "pc-orders", topics = "pc-orders", autoStartup = "false")
    public void onOrder(String payload) {
      OrderAndInvoiceListener.orders
          .computeIfAbsent(OrderAndInvoiceListener.number(payload, 0), k -> new AtomicInteger())
          .incrementAndGet();
    }
  }

  /** The listener of the invoices topic, which {@link OrderAndInvoiceListener} calls too. */
  static class Invoices {
    @Idempotent(bizType = "invoice", header = "invoice-no")
    @KafkaListener(id = "pc-invoices", topics = "pc-invoices", autoStartup = "false")
    public void onInvoice(String payload) {
      OrderAndInvoiceListener.invoices
          .computeIfAbsent(OrderAndInvoiceListener.number(payload, 1), k -> new AtomicInteger())
          .incrementAndGet();
    }
  }

  /** Seeks its partition back to the first record when a record asks it to replay, once. */
  static class ReplayListener {
    static final Map<String, AtomicInteger> applied = new ConcurrentHashMap<>();
    private static final AtomicInteger replays = new AtomicInteger();

    @Idempotent(bizType = "replay", header = "order-no")
    @KafkaListener(id = REPLAY, topics = REPLAY)
    public void onRecord(ConsumerRecord<String, String> record, Consumer<?, ?> consumer) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      applied.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      if (record.headers().lastHeader("replay") != null && replays.getAndIncrement() == 0) {
        consumer.seek(new TopicPartition(record.topic(), record.partition()), 0);
      }
    }
  }

  /** One listener per ack mode, each on its own topic and container factory. */
  static class AckModeListeners {
    private final JdbcTemplate jdbc;

    AckModeListeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = ACK + "BATCH", header = "order-no")
    @KafkaListener(id = ACK + "BATCH", topics = ACK + "BATCH", containerFactory = "ackBATCH")
    void batch(String payload, @Header("order-no") String orderNo) {
      effect(jdbc, "ack", orderNo);
    }

    @Idempotent(bizType = ACK + "RECORD", header = "order-no")
    @KafkaListener(id = ACK + "RECORD", topics = ACK + "RECORD", containerFactory = "ackRECORD")
    void record(String payload, @Header("order-no") String orderNo) {
      effect(jdbc, "ack", orderNo);
    }

    @Idempotent(bizType = ACK + "COUNT", header = "order-no")
    @KafkaListener(id = ACK + "COUNT", topics = ACK + "COUNT", containerFactory = "ackCOUNT")
    void count(String payload, @Header("order-no") String orderNo) {
      effect(jdbc, "ack", orderNo);
    }

    @Idempotent(bizType = ACK + "TIME", header = "order-no")
    @KafkaListener(id = ACK + "TIME", topics = ACK + "TIME", containerFactory = "ackTIME")
    void time(String payload, @Header("order-no") String orderNo) {
      effect(jdbc, "ack", orderNo);
    }

    @Idempotent(bizType = ACK + "COUNT_TIME", header = "order-no")
    @KafkaListener(
        id = ACK + "COUNT_TIME",
        topics = ACK + "COUNT_TIME",
        containerFactory = "ackCOUNT_TIME")
    void countTime(String payload, @Header("order-no") String orderNo) {
      effect(jdbc, "ack", orderNo);
    }

    @Idempotent(bizType = ACK + "MANUAL", header = "order-no")
    @KafkaListener(id = ACK + "MANUAL", topics = ACK + "MANUAL", containerFactory = "ackMANUAL")
    void manual(String payload, @Header("order-no") String orderNo, Acknowledgment ack) {
      effect(jdbc, "ack", orderNo);
      ack.acknowledge();
    }

    @Idempotent(bizType = ACK + "MANUAL_IMMEDIATE", header = "order-no")
    @KafkaListener(
        id = ACK + "MANUAL_IMMEDIATE",
        topics = ACK + "MANUAL_IMMEDIATE",
        containerFactory = "ackMANUAL_IMMEDIATE")
    void manualImmediate(String payload, @Header("order-no") String orderNo, Acknowledgment ack) {
      effect(jdbc, "ack", orderNo);
      ack.acknowledge();
    }
  }

  /**
   * A COUNT and a TIME listener, each with a second consumer of its group that starts later, whose
   * containers commit only after 1000 records or a minute (and, in COUNT, when a poll comes back
   * empty).
   */
  static class RareCommitListeners {
    private final JdbcTemplate jdbc;

    RareCommitListeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = ACK_REBALANCE + "COUNT", header = "order-no")
    @KafkaListener(
        id = ACK_REBALANCE + "COUNT-a",
        groupId = ACK_REBALANCE + "COUNT",
        topics = ACK_REBALANCE + "COUNT",
        containerFactory = "rareCOUNT")
    void countA(String payload, @Header("order-no") String orderNo) {
      effect(jdbc, "ackreb-a", orderNo);
    }

    @Idempotent(bizType = ACK_REBALANCE + "COUNT", header = "order-no")
    @KafkaListener(
        id = ACK_REBALANCE + "COUNT-b",
        groupId = ACK_REBALANCE + "COUNT",
        topics = ACK_REBALANCE + "COUNT",
        containerFactory = "rareCOUNT",
        autoStartup = "false")
    void countB(String payload, @Header("order-no") String orderNo) {
      effect(jdbc, "ackreb-b", orderNo);
    }

    @Idempotent(bizType = ACK_REBALANCE + "TIME", header = "order-no")
    @KafkaListener(
        id = ACK_REBALANCE + "TIME-a",
        groupId = ACK_REBALANCE + "TIME",
        topics = ACK_REBALANCE + "TIME",
        containerFactory = "rareTIME")
    void timeA(String payload, @Header("order-no") String orderNo) {
      effect(jdbc, "ackreb-a", orderNo);
    }

    @Idempotent(bizType = ACK_REBALANCE + "TIME", header = "order-no")
    @KafkaListener(
        id = ACK_REBALANCE + "TIME-b",
        groupId = ACK_REBALANCE + "TIME",
        topics = ACK_REBALANCE + "TIME",
        containerFactory = "rareTIME",
        autoStartup = "false")
    void timeB(String payload, @Header("order-no") String orderNo) {
      effect(jdbc, "ackreb-b", orderNo);
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
    SimpleMeterRegistry meterRegistry() {
      return new SimpleMeterRegistry();
    }

    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }

    @Bean
    ReplayListener replayListener() {
      return new ReplayListener();
    }

    @Bean
    Orders orders() {
      return new Orders();
    }

    @Bean
    Invoices invoices() {
      return new Invoices();
    }

    @Bean
    OrderAndInvoiceListener orderAndInvoiceListener(Orders orders, Invoices invoices) {
      return new OrderAndInvoiceListener(orders, invoices);
    }

    @Bean
    AckModeListeners ackModeListeners(JdbcTemplate jdbc) {
      return new AckModeListeners(jdbc);
    }

    @Bean
    RareCommitListeners rareCommitListeners(JdbcTemplate jdbc) {
      return new RareCommitListeners(jdbc);
    }

    @Bean
    RareCommitFactory rareCOUNT(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      return new RareCommitFactory(configurer, consumerFactory, AckMode.COUNT);
    }

    @Bean
    RareCommitFactory rareTIME(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      return new RareCommitFactory(configurer, consumerFactory, AckMode.TIME);
    }

    /**
     * A container factory per ack mode, named {@code ack} and the mode, for the listeners of {@link
     * AckModeListeners}.
     */
    @Bean
    static BeanDefinitionRegistryPostProcessor ackModeFactories() {
      return registry -> {
        for (AckMode mode : AckMode.values()) {
          RootBeanDefinition factory = new RootBeanDefinition(AckModeFactory.class);
          factory.setAutowireMode(AbstractBeanDefinition.AUTOWIRE_CONSTRUCTOR);
          factory.getConstructorArgumentValues().addIndexedArgumentValue(2, mode);
          registry.registerBeanDefinition("ack" + mode, factory);
        }
      };
    }
  }

  /** Boot's container factory with {@code mode}, an ack count of 4 and an ack time of 300 ms. */
  static class AckModeFactory extends ConcurrentKafkaListenerContainerFactory<Object, Object> {
    AckModeFactory(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        AckMode mode) {
      configurer.configure(this, consumerFactory);
      getContainerProperties().setAckMode(mode);
      getContainerProperties().setAckCount(4);
      getContainerProperties().setAckTime(300);
    }
  }

  /** {@link AckModeFactory} committing only after 1000 records or a minute. */
  static class RareCommitFactory extends AckModeFactory {
    RareCommitFactory(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        AckMode mode) {
      super(configurer, consumerFactory, mode);
      getContainerProperties().setAckCount(1000);
      getContainerProperties().setAckTime(60_000);
    }
  }
}
