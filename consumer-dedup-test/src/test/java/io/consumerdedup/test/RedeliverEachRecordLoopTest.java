package io.consumerdedup.test;

import static org.assertj.core.api.Assertions.as;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.TransactionBoundDataSource;
import io.consumerdedup.kafka.DeadLetterHandler;
import io.consumerdedup.kafka.DedupPollLoop;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.JdbcTransactionalProcessor;
import io.consumerdedup.kafka.KeyExtractor;
import io.consumerdedup.kafka.KeyExtractors;
import io.consumerdedup.kafka.RecordProcessor;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.assertj.core.api.InstanceOfAssertFactories;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;

/**
 * Redelivery testing of a plain kafka-clients poll loop, on the in-JVM broker and PostgreSQL: each
 * record reaches the processor twice, and a body that ran twice is named.
 */
class RedeliverEachRecordLoopTest {
  private static final String KEY_HEADER = "order-no";
  private static final Duration WAIT = Duration.ofSeconds(30);

  private static String schema;
  private static HikariDataSource dataSource;
  private static IdempotentExecutor executor;
  private static KafkaProducer<String, String> producer;

  private final ExecutorService threads = Executors.newCachedThreadPool();
  private final RedeliveryReport report = new RedeliveryReport();
  private final Map<String, AtomicInteger> charges = new ConcurrentHashMap<>();
  private String topic;
  private DedupPollLoop<String, String> loop;

  @BeforeAll
  static void setUp() {
    schema = TestDatabase.newSchema("redeliver_loop");
    dataSource = TestDatabase.dataSource(schema, 4);
    executor = IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build()).build();
    producer = TestKafka.producer();
  }

  @AfterAll
  static void tearDown() {
    producer.close();
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  @BeforeEach
  void newTopic() {
    topic = "payments-" + UUID.randomUUID().toString().substring(0, 8);
    TestKafka.createTopics(1, topic);
  }

  @AfterEach
  void stopLoop() {
    if (loop != null) {
      loop.close();
    }
    threads.shutdownNow();
  }

  @Test
  void aBusinessKeyPassesEveryRecordArrivesTwiceAndIsChargedOnce() throws Exception {
    start(KeyExtractors.header(KEY_HEADER), true);

    send("ORD-1", "ORD-2", "ORD-3");

    await().atMost(WAIT).until(() -> report.redeliveredCopies() == 3);
    report.assertNoBodyRanTwice();
    assertThat(report.bodyRuns()).isEqualTo(3);
    assertThat(report.failedRedeliveries()).isEmpty();
    assertThat(charges).containsOnlyKeys(orders("ORD-1", "ORD-2", "ORD-3"));
    assertThat(charges.values()).allSatisfy(count -> assertThat(count).hasValue(1));
  }

  @Test
  void aKeyThatChangesBetweenDeliveriesIsReportedNamingTheListenerAndBothRuns() throws Exception {
    KeyExtractor<String, String> requestId =
        KeyExtractor.named("a request id per delivery", r -> Optional.of(UUID.randomUUID() + ""));
    start(requestId, true);

    send("ORD-1", "ORD-2");

    await().atMost(WAIT).until(() -> report.redeliveredCopies() == 2);
    assertThat(report.bodiesRunTwice())
        .extracting(RedeliveryReport.RecordRuns::record)
        .containsExactly(topic + "-0@0", topic + "-0@1");
    assertThatThrownBy(report::assertNoBodyRanTwice)
        .isInstanceOf(AssertionError.class)
        .hasMessageContaining("2 records were processed twice")
        .hasMessageContaining("payments ran its body 2 times for record " + topic + "-0@0")
        .hasMessageContaining("(key '" + topic + "-ORD-1')")
        .hasMessageContaining("run 1 on the first delivery")
        .hasMessageContaining("run 2 on the redelivered copy");
    assertThat(charges.get(topic + "-ORD-1")).hasValue(2);
  }

  /**
   * A record without its key header is dead-lettered on its first delivery and never copied: a test
   * waiting for its copy waits in vain, and must be told which record it was and why.
   */
  @Test
  void aRecordWithoutItsKeyIsNamedAsNeverRedeliveredWithWhy() throws Exception {
    Logger reportLog = (Logger) LoggerFactory.getLogger(RedeliveryReport.class);
    ListAppender<ILoggingEvent> logged = new ListAppender<>();
    logged.start();
    reportLog.addAppender(logged);
    List<ConsumerRecord<String, String>> deadLettered = new CopyOnWriteArrayList<>();
    try {
      startWith(
          report.redeliverEachRecord(
              handler("payments", executor, KeyExtractors.header(KEY_HEADER), true)),
          (record, reason) -> deadLettered.add(record));
      send("ORD-1");
      producer.send(new ProducerRecord<>(topic, 0, "no-key", "charge without an order")).get();

      await().atMost(WAIT).until(() -> deadLettered.size() == 1 && report.redeliveredCopies() == 1);

      String why = "header 'order-no' is absent or empty";
      assertThat(report.toString())
          .contains(topic + "-0@1", "never redelivered", "DedupKeyMissingException", why);
      assertThat(logged.list)
          .filteredOn(event -> event.getLevel() == Level.WARN)
          .extracting(ILoggingEvent::getFormattedMessage)
          .anySatisfy(line -> assertThat(line).contains(topic + "-0@1", "dead-lettered", why));
    } finally {
      reportLog.detachAppender(logged);
    }
  }

  @Test
  void aPollWhoseKeysAreClaimedOneByOneIsRedeliveredToo() throws Exception {
    start(KeyExtractors.header(KEY_HEADER), false);

    send("ORD-1", "ORD-2");

    await().atMost(WAIT).until(() -> report.redeliveredCopies() == 2);
    report.assertNoBodyRanTwice();
    assertThat(report.bodyRuns()).isEqualTo(2);
  }

  @Test
  void aProcessorCalledWithoutAPollGetsTheCopyAtOnce() {
    // No loop and no database: the in-memory store, the processor called directly.
    IdempotentExecutor inMemory = IdempotentExecutor.builder(new InMemoryDedupStore()).build();
    ConsumerRecord<String, String> record = new ConsumerRecord<>("payments", 0, 7, "k", "charge");
    record.headers().add(KEY_HEADER, "ORD-7".getBytes(StandardCharsets.UTF_8));
    RecordProcessor<String, String> byHeader =
        report.redeliverEachRecord(
            handler("by-header", inMemory, KeyExtractors.header(KEY_HEADER), true));
    RecordProcessor<String, String> byRandom =
        report.redeliverEachRecord(
            handler("by-random", inMemory, r -> Optional.of(UUID.randomUUID().toString()), true));

    assertThat(byHeader.process(record)).isEqualTo(Outcome.PROCESSED);
    assertThat(report.bodiesRunTwice()).isEmpty();
    assertThat(byRandom.process(record)).isEqualTo(Outcome.PROCESSED);

    assertThat(report.redeliveredCopies()).isEqualTo(2);
    assertThat(report.bodiesRunTwice())
        .extracting(RedeliveryReport.RecordRuns::listener)
        .containsExactly("by-random");
    assertThat(report.bodiesRunTwice().get(0).runs())
        .extracting(RedeliveryReport.BodyRun::copy)
        .containsExactly(1, 2);
  }

  @Test
  void aKeyTakenFromTheIdentityOfTheRecordsBytesIsReportedAsARealRedeliveryWouldShowIt() {
    // A real redelivery deserializes new arrays; a copy sharing the first delivery's would hide
    // a key that changes with them.
    IdempotentExecutor inMemory = IdempotentExecutor.builder(new InMemoryDedupStore()).build();
    ConsumerRecord<byte[], String> record =
        new ConsumerRecord<>("payments", 0, 8, "k".getBytes(StandardCharsets.UTF_8), "charge");
    record.headers().add(KEY_HEADER, "ORD-8".getBytes(StandardCharsets.UTF_8));
    Map<String, KeyExtractor<byte[], String>> identities =
        Map.of(
            "by-header-array",
            r -> Optional.of(String.valueOf((Object) r.headers().lastHeader(KEY_HEADER).value())),
            "by-key-array",
            r -> Optional.of(String.valueOf((Object) r.key())));
    identities.forEach(
        (listener, key) ->
            assertThat(
                    report
                        .redeliverEachRecord(
                            IdempotentRecordHandler.<byte[], String>builder(inMemory)
                                .bizType(listener)
                                .key(key)
                                .handler(report.countBodyRuns(listener, r -> {}))
                                .build())
                        .process(record))
                .isEqualTo(Outcome.PROCESSED));

    assertThat(report.bodiesRunTwice())
        .extracting(RedeliveryReport.RecordRuns::listener)
        .containsExactlyInAnyOrder("by-header-array", "by-key-array");
  }

  @Test
  void aHandlerThatWipesItsRecordsBytesPassesAsItsRealRedeliveryWouldBeADuplicate() {
    // Kafka redelivers a record as new bytes: the copy must carry them as they came, not as the
    // first delivery's handler left them (wiped card data), or a correct handler's copy conflicts
    // with its own fingerprint and the test fails.
    IdempotentRecordHandler<String, byte[]> cards =
        IdempotentRecordHandler.<String, byte[]>builder(executor)
            .bizType("wiped-card")
            .key(KeyExtractors.header(KEY_HEADER))
            .fingerprint(record -> HexFormat.of().formatHex(record.value()))
            .handler(report.countBodyRuns("cards", record -> Arrays.fill(record.value(), (byte) 0)))
            .build();
    RecordProcessor<String, byte[]> processor = report.redeliverEachRecord(cards);
    ConsumerRecord<String, byte[]> alone = card(30, "WIPE-30");
    ConsumerRecord<String, byte[]> ofAPoll = card(31, "WIPE-31");

    assertThat(processor.process(alone)).isEqualTo(Outcome.PROCESSED);
    processor.prepare(List.of(ofAPoll));
    assertThat(processor.process(ofAPoll)).isEqualTo(Outcome.PROCESSED);
    assertThat(processor.settle()).isEmpty();

    assertThat(alone.value()).as("the first delivery's bytes, wiped").containsOnly(0);
    assertThat(report.redeliveredCopies()).isEqualTo(2);
    assertThat(report.failedRedeliveries()).isEmpty();
    report.assertNoBodyRanTwice();
  }

  private static ConsumerRecord<String, byte[]> card(long offset, String orderNo) {
    ConsumerRecord<String, byte[]> record =
        new ConsumerRecord<>(
            "cards", 0, offset, orderNo, "4111 1111 1111 1111".getBytes(StandardCharsets.UTF_8));
    record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    return record;
  }

  @Test
  void aHandlerThatFailsOnceAndSucceedsOnTheLoopsRetryPassesTheAssertion() throws Exception {
    // A downstream that fails once: the loop retries the record, as production would, and its
    // copy is a duplicate. The failed run applied nothing, so nothing ran twice.
    failOnceThenSucceed(() -> new IllegalStateException("payment provider unavailable"));
  }

  @Test
  void aHandlerWhoseFirstRunThrowsAnUnprintableExceptionAndWhoseRetrySucceedsPassesTheAssertion()
      throws Exception {
    // An exception that cannot describe itself (it prints an entity loaded lazily): its run still
    // counts as one that threw, so the loop's retry is not taken for a second application.
    failOnceThenSucceed(UnprintableFailure::new);
  }

  private void failOnceThenSucceed(Supplier<RuntimeException> failure) throws Exception {
    Map<String, Boolean> failedOnce = new ConcurrentHashMap<>();
    IdempotentRecordHandler<String, String> payments =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType("payment")
            .key(KeyExtractors.header(KEY_HEADER))
            .handler(
                report.countBodyRuns(
                    "payments",
                    record -> {
                      if (failedOnce.putIfAbsent(record.key(), true) == null) {
                        throw failure.get();
                      }
                      charge(record);
                    }))
            .build();
    loop =
        DedupPollLoop.builder(
                TestKafka.consumerConfig("billing-" + topic),
                List.of(topic),
                report.redeliverEachRecord(payments))
            .pollTimeout(Duration.ofMillis(200))
            .retryBackOff(Duration.ofMillis(50))
            .deadLetterHandler(
                (record, reason) -> {
                  throw new AssertionError("nothing should be dead-lettered: " + reason);
                })
            .build();
    threads.submit(loop);

    send("ORD-1");

    await().atMost(WAIT).until(() -> report.redeliveredCopies() == 1);
    assertThat(failedOnce).as("the first run threw").containsKey(topic + "-ORD-1");
    assertThat(charges.get(topic + "-ORD-1")).hasValue(1);
    assertThat(report.bodyRuns()).as("the failed run and its retry").isEqualTo(2);
    assertThat(report.bodiesRunTwice()).isEmpty();
    report.assertNoBodyRanTwice();
  }

  @Test
  void aLoopThatRedeliversNothingFailsTheAssertionInsteadOfPassingUntested() throws Exception {
    // The report's counting is wired, its redelivery is not: each record arrives once.
    startWith(handler("payments", executor, KeyExtractors.header(KEY_HEADER), true));

    send("ORD-1", "ORD-2");

    await().atMost(WAIT).until(() -> report.bodyRuns() == 2);
    assertThat(report.redeliveredCopies()).isZero();
    assertThatThrownBy(report::assertNoBodyRanTwice)
        .isInstanceOf(AssertionError.class)
        .hasMessageContaining("No record was redelivered, so this test did not test redelivery")
        .hasMessageContaining("redeliverEachRecord");
  }

  @Test
  void copiesRedeliveredToABodyThatIsNotCountedFailTheAssertion() throws Exception {
    startWith(
        report.redeliverEachRecord(
            IdempotentRecordHandler.<String, String>builder(executor)
                .bizType("payment")
                .key(KeyExtractors.header(KEY_HEADER))
                .handler(this::charge)
                .build()));

    send("ORD-1", "ORD-2");

    await().atMost(WAIT).until(() -> report.redeliveredCopies() == 2);
    assertThat(report.bodyRuns()).isZero();
    assertThat(charges.values()).allSatisfy(count -> assertThat(count).hasValue(1));
    assertThatThrownBy(report::assertNoBodyRanTwice)
        .isInstanceOf(AssertionError.class)
        .hasMessageContaining("2 copies were redelivered but no body run was counted")
        .hasMessageContaining("countBodyRuns");
  }

  @Test
  void copiesThatAllFailFailTheAssertionNamingTheirFailures() throws Exception {
    RecordProcessor<String, String> payments =
        handler("payments", executor, KeyExtractors.header(KEY_HEADER), false);
    Map<Long, Boolean> seen = new ConcurrentHashMap<>();
    // The store is out of reach when the copies arrive: they never reach the dedup.
    startWith(
        report.redeliverEachRecord(
            record -> {
              if (seen.putIfAbsent(record.offset(), true) != null) {
                throw new IllegalStateException("store unreachable");
              }
              return payments.process(record);
            }));

    send("ORD-1", "ORD-2");

    await().atMost(WAIT).until(() -> report.redeliveredCopies() == 2);
    assertThat(report.bodyRuns()).isEqualTo(2);
    assertThat(report.failedRedeliveries()).hasSize(2);
    assertThatThrownBy(report::assertNoBodyRanTwice)
        .isInstanceOf(AssertionError.class)
        .hasMessageContaining("Every redelivered copy failed (2 copies)")
        .hasMessageContaining("store unreachable");
  }

  @Test
  void aCopyThatFailsFailsTheAssertionThoughTheOtherCopiesWereDuplicates() throws Exception {
    RecordProcessor<String, String> payments =
        handler("payments", executor, KeyExtractors.header(KEY_HEADER), false);
    Map<Long, Boolean> seen = new ConcurrentHashMap<>();
    // The copy of the first record never reaches the dedup; the second's is a duplicate.
    startWith(
        report.redeliverEachRecord(
            record -> {
              if (seen.putIfAbsent(record.offset(), true) != null && record.offset() == 0) {
                throw new IllegalStateException("store unreachable");
              }
              return payments.process(record);
            }));

    send("ORD-1", "ORD-2");

    await().atMost(WAIT).until(() -> report.redeliveredCopies() == 2);
    assertThat(report.failedRedeliveries()).hasSize(1);
    assertThatThrownBy(report::assertNoBodyRanTwice)
        .isInstanceOf(AssertionError.class)
        .hasMessageContaining("1 of 2 redelivered copies failed")
        .hasMessageContaining("copy of " + topic + "-0@0")
        .hasMessageContaining("store unreachable");
  }

  @Test
  void aCopyThatThrowsAnErrorLeavesTheOtherCopiesOfItsPollDeliveredAndCounted() {
    // One poll of two records, handed to the processor as the loop does, on the in-memory store.
    IdempotentExecutor inMemory = IdempotentExecutor.builder(new InMemoryDedupStore()).build();
    RecordProcessor<String, String> payments =
        handler("payments", inMemory, KeyExtractors.header(KEY_HEADER), true);
    Map<Long, Boolean> seen = new ConcurrentHashMap<>();
    RecordProcessor<String, String> processor =
        report.redeliverEachRecord(
            new RecordProcessor<String, String>() {
              @Override
              public void prepare(List<ConsumerRecord<String, String>> records) {
                payments.prepare(records);
              }

              @Override
              public Outcome process(ConsumerRecord<String, String> record) {
                if (seen.putIfAbsent(record.offset(), true) != null && record.offset() == 0) {
                  throw new AssertionError("copy refused by a test double");
                }
                return payments.process(record);
              }

              @Override
              public List<ConsumerRecord<String, String>> settle() {
                return payments.settle();
              }
            });
    List<ConsumerRecord<String, String>> poll = List.of(record(0, "ORD-1"), record(1, "ORD-2"));

    processor.prepare(poll);
    poll.forEach(processor::process);
    processor.settle();

    assertThat(report.redeliveredCopies()).as("copies handed to the processor").isEqualTo(2);
    assertThat(report.bodiesRunTwice()).isEmpty();
    assertThatThrownBy(report::assertNoBodyRanTwice)
        .isInstanceOf(AssertionError.class)
        .hasMessageContaining("1 of 2 redelivered copies failed")
        .hasMessageContaining("copy refused by a test double");
  }

  @Test
  void aPollRunInOneTransactionNamesItsFirstRunsAsTheFirstDelivery() throws Exception {
    // Mode TRANSACTIONAL over a poll loop: JdbcTransactionalProcessor runs the whole poll's
    // handlers inside prepare(), in one transaction, driven here as the loop drives it.
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(dataSource);
    try (IdempotentExecutor transactional =
        IdempotentExecutor.builder(JdbcDedupStore.builder(transactions).build())
            .mode(DedupMode.TRANSACTIONAL)
            .build()) {
      RecordProcessor<String, String> processor =
          report.redeliverEachRecord(
              JdbcTransactionalProcessor.of(
                  transactions,
                  handler(
                      "payments",
                      transactional,
                      r -> Optional.of(UUID.randomUUID().toString()),
                      true)));
      List<ConsumerRecord<String, String>> poll = List.of(record(0, topic + "-ORD-1"));

      processor.prepare(poll);
      poll.forEach(processor::process);
      processor.settle();
    }

    assertThat(report.redeliveredCopies()).as("copies handed to the processor").isEqualTo(1);
    assertThat(report.bodiesRunTwice())
        .singleElement()
        .satisfies(
            runs ->
                assertThat(runs.runs())
                    .extracting(RedeliveryReport.BodyRun::copy)
                    .as("the runs of a key that changes per delivery, by delivery")
                    .containsExactly(1, 2));
    assertThatThrownBy(report::assertNoBodyRanTwice)
        .isInstanceOf(AssertionError.class)
        .hasMessageContaining("run 1 on the first delivery")
        .hasMessageContaining("run 2 on the redelivered copy");
  }

  @Test
  void aCopyThatThrowsAnUnprintableExceptionIsNamedAndTheOtherCopiesOfItsPollAreDelivered() {
    // One poll of two records, handed to the processor as the loop does, on the in-memory store.
    IdempotentExecutor inMemory = IdempotentExecutor.builder(new InMemoryDedupStore()).build();
    RecordProcessor<String, String> payments =
        handler("payments", inMemory, KeyExtractors.header(KEY_HEADER), true);
    Map<Long, Boolean> seen = new ConcurrentHashMap<>();
    AtomicInteger unprintableThrown = new AtomicInteger();
    RecordProcessor<String, String> processor =
        report.redeliverEachRecord(
            new RecordProcessor<String, String>() {
              @Override
              public void prepare(List<ConsumerRecord<String, String>> records) {
                payments.prepare(records);
              }

              @Override
              public Outcome process(ConsumerRecord<String, String> record) {
                if (seen.putIfAbsent(record.offset(), true) != null && record.offset() == 0) {
                  unprintableThrown.incrementAndGet();
                  throw new UnprintableFailure();
                }
                return payments.process(record);
              }

              @Override
              public List<ConsumerRecord<String, String>> settle() {
                return payments.settle();
              }
            });
    List<ConsumerRecord<String, String>> poll = List.of(record(0, "ORD-1"), record(1, "ORD-2"));

    processor.prepare(poll);
    poll.forEach(processor::process);
    processor.settle();

    assertThat(unprintableThrown).as("copies that threw the unprintable exception").hasValue(1);
    assertThat(report.redeliveredCopies()).as("copies handed to the processor").isEqualTo(2);
    assertThat(report.failedRedeliveries())
        .singleElement(as(InstanceOfAssertFactories.STRING))
        .startsWith("copy of payments-0@0: " + UnprintableFailure.class.getName());
    assertThatThrownBy(report::assertNoBodyRanTwice)
        .isInstanceOf(AssertionError.class)
        .hasMessageContaining("1 of 2 redelivered copies failed");
  }

  /** An exception whose message cannot be read, as one that prints an entity loaded lazily. */
  private static final class UnprintableFailure extends RuntimeException {
    private static final long serialVersionUID = 1L;

    @Override
    public String getMessage() {
      throw new IllegalStateException("could not initialize proxy - no Session");
    }
  }

  private static ConsumerRecord<String, String> record(long offset, String orderNo) {
    ConsumerRecord<String, String> record =
        new ConsumerRecord<>("payments", 0, offset, orderNo, "charge");
    record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    return record;
  }

  private void start(KeyExtractor<String, String> key, boolean claimsPerPoll) {
    startWith(report.redeliverEachRecord(handler("payments", executor, key, claimsPerPoll)));
  }

  private void startWith(RecordProcessor<String, String> processor) {
    startWith(
        processor,
        (record, reason) -> {
          throw new AssertionError("nothing should be dead-lettered: " + reason);
        });
  }

  private void startWith(
      RecordProcessor<String, String> processor, DeadLetterHandler<String, String> deadLetters) {
    loop =
        DedupPollLoop.builder(
                TestKafka.consumerConfig("billing-" + topic), List.of(topic), processor)
            .pollTimeout(Duration.ofMillis(200))
            .deadLetterHandler(deadLetters)
            .build();
    threads.submit(loop);
  }

  private IdempotentRecordHandler<String, String> handler(
      String listener,
      IdempotentExecutor on,
      KeyExtractor<String, String> key,
      boolean claimsPerPoll) {
    return IdempotentRecordHandler.<String, String>builder(on)
        .bizType("payment")
        .key(key)
        .claimsPerPoll(claimsPerPoll)
        .handler(report.countBodyRuns(listener, this::charge))
        .build();
  }

  private void charge(ConsumerRecord<String, String> record) {
    charges.computeIfAbsent(record.key(), k -> new AtomicInteger()).incrementAndGet();
  }

  /** Sends one record per order, keyed by the order (unique to this test) in key and header. */
  private void send(String... orderNos) throws Exception {
    for (String orderNo : orders(orderNos)) {
      ProducerRecord<String, String> record =
          new ProducerRecord<>(topic, 0, orderNo, "charge " + orderNo);
      record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
      producer.send(record).get();
    }
  }

  private String[] orders(String... orderNos) {
    return java.util.Arrays.stream(orderNos).map(o -> topic + "-" + o).toArray(String[]::new);
  }
}
