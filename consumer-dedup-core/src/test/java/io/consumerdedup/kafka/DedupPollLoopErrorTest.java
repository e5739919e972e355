package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.KEY_HEADER;
import static io.consumerdedup.kafka.LoopFixture.WAIT;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.ReplyLosingStore;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.ThrowingLog;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Predicate;
import java.util.logging.Logger;
import javax.sql.DataSource;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Errors ({@link StackOverflowError}, {@link OutOfMemoryError}...) in the poll loop, in the outcome
 * writer and while a FAILED is written on the loop's thread, an executor closed under a running
 * loop, and a processor whose settle fails: no key is stranded PROCESSING, no record is lost or
 * applied twice, and the application sees a loop that ended.
 */
class DedupPollLoopErrorTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_error");

  private static final Duration RENEWAL = Duration.ofMillis(300);

  private final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();
  private final List<ConsumerRecord<String, String>> deadLettered = new CopyOnWriteArrayList<>();
  private final List<Exception> deadLetterReasons = new CopyOnWriteArrayList<>();
  private final ExecutorService threads = Executors.newCachedThreadPool();

  @AfterEach
  void tearDown() throws InterruptedException {
    threads.shutdownNow();
    threads.awaitTermination(30, TimeUnit.SECONDS);
  }

  private static IdempotentExecutor executor(DedupStore store) {
    return IdempotentExecutor.builder(store)
        .lease(Duration.ofSeconds(3))
        .renewalInterval(RENEWAL)
        .build();
  }

  private DedupPollLoop<String, String> loop(
      IdempotentExecutor executor, boolean claimsPerPoll, RecordHandler<String, String> work) {
    return loop(
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(BIZ_TYPE)
            .key(KeyExtractors.header(KEY_HEADER))
            .claimsPerPoll(claimsPerPoll)
            .handler(work)
            .build(),
        2);
  }

  private DedupPollLoop<String, String> loop(
      RecordProcessor<String, String> processor, int maxAttempts) {
    return LoopFixture.quick(
            DedupPollLoop.builder(
                TestKafka.consumerConfig(fixture.group()), List.of(fixture.topic()), processor))
        .maxAttempts(maxAttempts)
        .closeTimeout(Duration.ofSeconds(10))
        .deadLetterHandler(
            (record, reason) -> {
              deadLettered.add(record);
              deadLetterReasons.add(reason);
            })
        .build();
  }

  private void send(int from, int to) throws Exception {
    for (int i = from; i < to; i++) {
      ProducerRecord<String, String> record =
          new ProducerRecord<>(fixture.topic(), 0, order(i), "charge " + order(i));
      record.headers().add(KEY_HEADER, order(i).getBytes(StandardCharsets.UTF_8));
      fixture.producer().send(record);
    }
    fixture.producer().flush();
  }

  private void apply(ConsumerRecord<String, String> record) {
    effects
        .computeIfAbsent(LoopFixture.orderNo(record), k -> new AtomicInteger())
        .incrementAndGet();
  }

  private static String order(int i) {
    return fixture.topic() + "-ORD-" + i;
  }

  private static Optional<DedupRecord> row(int i) {
    return fixture.store().find(DedupKey.of(BIZ_TYPE, order(i)));
  }

  /** The keys 0 until {@code count} that are PROCESSING, with their lease_until. */
  private static Map<String, Object> processing(int count) {
    Map<String, Object> leases = new ConcurrentHashMap<>();
    for (int i = 0; i < count; i++) {
      row(i)
          .filter(r -> r.status() == DedupStatus.PROCESSING)
          .ifPresent(r -> leases.put(r.key().bizKey(), r.leaseUntil().orElseThrow()));
    }
    return leases;
  }

  private void assertEachAppliedOnceAndSuccess(int count) {
    assertThat(effects).hasSize(count);
    assertThat(effects.values()).allSatisfy(n -> assertThat(n).hasValue(1));
    for (int i = 0; i < count; i++) {
      assertThat(row(i).orElseThrow().status()).as(order(i)).isEqualTo(DedupStatus.SUCCESS);
    }
  }

  private static Throwable endOf(Future<?> run) throws Exception {
    try {
      run.get(WAIT.toSeconds(), TimeUnit.SECONDS);
    } catch (ExecutionException e) {
      return e.getCause();
    }
    throw new AssertionError("run() returned normally");
  }

  private void aHandlerErrorEndsTheLoopWithoutStrandingThePoll(boolean claimsPerPoll)
      throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    send(0, 10);
    AtomicInteger errorsLeft = new AtomicInteger(1);
    try (IdempotentExecutor executor = executor(fixture.store())) {
      RecordHandler<String, String> work =
          record -> {
            if (LoopFixture.orderNo(record).equals(order(3)) && errorsLeft.getAndDecrement() > 0) {
              throw new StackOverflowError("deeply nested payload");
            }
            apply(record);
          };
      Future<?> first = threads.submit(loop(executor, claimsPerPoll, work));

      assertThat(endOf(first))
          .as("run() ends with the handler's Error")
          .isInstanceOf(StackOverflowError.class)
          .hasMessage("deeply nested payload");
      assertThat(errorsLeft.get()).as("the Error was thrown").isZero();
      // The failing record is FAILED (an attempt counted); the poll's other keys are released or
      // SUCCESS: none is PROCESSING under a lease that this process goes on renewing.
      assertThat(row(3).orElseThrow().status()).isEqualTo(DedupStatus.FAILED);
      Map<String, Object> stranded = processing(10);
      assertThat(stranded).as("keys left PROCESSING").isEmpty();
      Thread.sleep(RENEWAL.multipliedBy(3).toMillis());
      assertThat(processing(10)).as("no renewal goes on").isEqualTo(stranded);
      assertThat(TestKafka.committedOffsets(fixture.group()))
          .as("nothing committed past the failed record")
          .containsEntry(new TopicPartition(fixture.topic(), 0), 3L);

      try (RunningLoop second = RunningLoop.start(loop(executor, claimsPerPoll, work))) {
        LoopFixture.awaitCommitted(
            fixture.group(), Map.of(new TopicPartition(fixture.topic(), 0), 10L));
      }
    }
    assertEachAppliedOnceAndSuccess(10);
    assertThat(row(3).orElseThrow().attempts()).isEqualTo(2);
    assertThat(deadLettered).isEmpty();
  }

  @Test
  void aHandlerErrorReleasesThePollsOtherClaimsAndRunRethrowsIt() throws Exception {
    aHandlerErrorEndsTheLoopWithoutStrandingThePoll(true);
  }

  @Test
  void aHandlerErrorPerRecordFailsItsClaimAndRunRethrowsIt() throws Exception {
    aHandlerErrorEndsTheLoopWithoutStrandingThePoll(false);
  }

  /** An Error whose {@code getMessage()} throws, as one built around an unreadable entity. */
  static final class UnprintableError extends AssertionError {
    private static final long serialVersionUID = 1L;

    @Override
    public String getMessage() {
      throw new IllegalStateException("the entity's session is closed");
    }
  }

  @Test
  void aHandlerErrorThatCannotDescribeItselfStillEndsTheLoopWithThatError() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    send(0, 3);
    AtomicInteger errorsLeft = new AtomicInteger(1);
    try (IdempotentExecutor executor = executor(fixture.store())) {
      RecordHandler<String, String> work =
          record -> {
            if (LoopFixture.orderNo(record).equals(order(1)) && errorsLeft.getAndDecrement() > 0) {
              throw new UnprintableError();
            }
            apply(record);
          };

      // Caught as run() throws it: a Future's ExecutionException would print it as it is made.
      DedupPollLoop<String, String> first = loop(executor, true, work);
      CompletableFuture<Throwable> end = new CompletableFuture<>();
      threads.execute(
          () -> {
            try {
              first.run();
              end.complete(null);
            } catch (Throwable t) {
              end.complete(t);
            }
          });
      assertThat(end.get(WAIT.toSeconds(), TimeUnit.SECONDS))
          .as("run() ends with the handler's Error")
          .isInstanceOf(UnprintableError.class);
      assertThat(TestKafka.committedOffsets(fixture.group()))
          .as("nothing committed past the failed record")
          .containsEntry(new TopicPartition(fixture.topic(), 0), 1L);

      try (RunningLoop second = RunningLoop.start(loop(executor, true, work))) {
        LoopFixture.awaitCommitted(
            fixture.group(), Map.of(new TopicPartition(fixture.topic(), 0), 3L));
      }
    }
    assertEachAppliedOnceAndSuccess(3);
    assertThat(deadLettered).isEmpty();
  }

  @Test
  void aRecordWhoseHandlerAlwaysThrowsAnErrorIsDeadLetteredOnceItsAttemptsAreSpent()
      throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    send(0, 5);
    AtomicInteger errors = new AtomicInteger();
    try (IdempotentExecutor executor = executor(fixture.store())) {
      RecordHandler<String, String> work =
          record -> {
            if (LoopFixture.orderNo(record).equals(order(2))) {
              errors.incrementAndGet();
              throw new NoClassDefFoundError("com/example/Missing");
            }
            apply(record);
          };
      // maxAttempts 2: each loop the application starts ends with the Error, until the second
      // attempt (counted by the dedup table, across loops) dead-letters the record.
      assertThat(endOf(threads.submit(loop(executor, true, work))))
          .isInstanceOf(NoClassDefFoundError.class);
      assertThat(deadLettered).isEmpty();
      assertThat(endOf(threads.submit(loop(executor, true, work))))
          .isInstanceOf(NoClassDefFoundError.class);
      assertThat(deadLettered).extracting(ConsumerRecord::offset).containsExactly(2L);
      assertThat(deadLetterReasons.get(0))
          .isInstanceOf(HandlerErrorException.class)
          .hasCauseInstanceOf(NoClassDefFoundError.class);

      try (RunningLoop third = RunningLoop.start(loop(executor, true, work))) {
        LoopFixture.awaitCommitted(
            fixture.group(), Map.of(new TopicPartition(fixture.topic(), 0), 5L));
      }
    }
    assertThat(errors).hasValue(2);
    assertThat(effects).hasSize(4).doesNotContainKey(order(2));
    assertThat(effects.values()).allSatisfy(n -> assertThat(n).hasValue(1));
  }

  /**
   * An {@code Error} as a record's retry is claimed (an {@code OutOfMemoryError} while the answer
   * of a claim the database committed is read), before its handler runs, ends the loop as any
   * {@code Error} does. The loop counted it as a failed attempt of the handler: a record that had
   * failed once, two attempts allowed, was dead-lettered as "Handler threw OutOfMemoryError" having
   * run once, and its retry never ran.
   */
  @Test
  void anErrorAsARetryIsClaimedIsNoAttemptOfTheHandlerAndTheNextLoopAppliesTheRecord()
      throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    send(0, 1);
    ReplyLosingStore losing = ReplyLosingStore.in(fixture.store());
    AtomicInteger runs = new AtomicInteger();
    try (IdempotentExecutor executor = executor(losing.store())) {
      RecordHandler<String, String> failsFirst =
          record -> {
            if (runs.incrementAndGet() == 1) {
              // The retry's claim meets the Error once the database has committed it.
              losing.loseNextClaimReplyTo(
                  new OutOfMemoryError("Java heap space, reading the claim's answer"));
              throw new IllegalStateException("card network timeout");
            }
            apply(record);
          };
      assertThat(endOf(threads.submit(loop(executor, false, failsFirst))))
          .isInstanceOf(OutOfMemoryError.class);
      assertThat(losing.repliesLost()).as("claims answered with the Error").isEqualTo(1);
      assertThat(deadLetterReasons)
          .as("records dead-lettered after %s handler run(s) of the two allowed", runs)
          .isEmpty();

      try (RunningLoop next = RunningLoop.start(loop(executor, false, failsFirst))) {
        LoopFixture.awaitCommitted(
            fixture.group(), Map.of(new TopicPartition(fixture.topic(), 0), 1L));
      }
    }
    assertThat(runs).as("handler runs").hasValue(2);
    assertEachAppliedOnceAndSuccess(1);
    assertThat(deadLettered).isEmpty();
  }

  /**
   * An {@code Error} after the handler returned, before its SUCCESS was on its way (an {@code
   * OutOfMemoryError} as the mark is queued), ends the loop as any {@code Error} does. The loop
   * counted it as a failed attempt of the handler: with one attempt allowed, the record whose
   * effects were applied was dead-lettered as "Handler threw OutOfMemoryError".
   */
  @Test
  void anErrorAfterTheHandlerReturnedDeadLettersNothingAndTheRecordIsAppliedOnce()
      throws Exception {
    anErrorAfterTheHandlerReturnedIsNoFailedAttempt(true);
  }

  /** As above, with the record's key claimed as the record is reached. */
  @Test
  void anErrorAfterTheHandlerReturnedDeadLettersNothingAndTheRecordIsAppliedOnceClaimedAlone()
      throws Exception {
    anErrorAfterTheHandlerReturnedIsNoFailedAttempt(false);
  }

  private void anErrorAfterTheHandlerReturnedIsNoFailedAttempt(boolean claimsPerPoll)
      throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    send(0, 1);
    AtomicInteger thrown = new AtomicInteger();
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.AFTER_HANDLER && thrown.getAndIncrement() == 0) {
            throw new OutOfMemoryError("Java heap space, queuing the SUCCESS");
          }
        });
    try (IdempotentExecutor executor = executor(fixture.store())) {
      assertThat(endOf(threads.submit(loop(processor(executor, claimsPerPoll), 1))))
          .isInstanceOf(OutOfMemoryError.class);
      assertThat(thrown).as("Errors after the handler returned").hasValue(1);
      assertThat(deadLetterReasons)
          .as("records dead-lettered though their handler returned (%s)", effects)
          .isEmpty();

      try (RunningLoop next = RunningLoop.start(loop(processor(executor, claimsPerPoll), 1))) {
        LoopFixture.awaitCommitted(
            fixture.group(), Map.of(new TopicPartition(fixture.topic(), 0), 1L));
      }
    } finally {
      FaultPoints.install(null);
    }
    assertEachAppliedOnceAndSuccess(1);
    assertThat(deadLettered).isEmpty();
  }

  private IdempotentRecordHandler<String, String> processor(
      IdempotentExecutor executor, boolean claimsPerPoll) {
    return IdempotentRecordHandler.<String, String>builder(executor)
        .bizType(BIZ_TYPE)
        .key(KeyExtractors.header(KEY_HEADER))
        .claimsPerPoll(claimsPerPoll)
        .handler(this::apply)
        .build();
  }

  /**
   * A handler throws, each time, an exception whose message cannot be built ({@code getMessage()}
   * throws an {@code OutOfMemoryError}: a message formatted from a payload too large for the heap).
   * Its attempts were logged through a stand-in that read the message, and the OutOfMemoryError
   * came out of the log line: each loop the application started ended on the record, before it was
   * dead-lettered, and its partition never moved on.
   */
  @Test
  void aHandlerFailureWhoseMessageCannotBeBuiltIsDeadLetteredAndTheLoopGoesOn() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    send(0, 3);
    RecordHandler<String, String> work =
        record -> {
          if (LoopFixture.orderNo(record).equals(order(1))) {
            throw new UnbuildableMessageFailure();
          }
          apply(record);
        };
    try (IdempotentExecutor executor = executor(fixture.store());
        RunningLoop running = RunningLoop.start(loop(executor, true, work))) {
      TopicPartition partition = new TopicPartition(fixture.topic(), 0);
      await()
          .atMost(WAIT)
          .until(
              () ->
                  !running.isRunning()
                      || Long.valueOf(3L)
                          .equals(TestKafka.committedOffsets(fixture.group()).get(partition)));
      assertThat(running.isRunning())
          .as("the loop, after a handler failure whose message cannot be built")
          .isTrue();
    }
    assertThat(deadLettered).extracting(ConsumerRecord::offset).containsExactly(1L);
    assertThat(effects).hasSize(2).doesNotContainKey(order(1));
  }

  /** Formats a payload too large for the heap whenever it is asked for its message. */
  private static final class UnbuildableMessageFailure extends RuntimeException {
    private static final long serialVersionUID = 1L;

    @Override
    public String getMessage() {
      throw new OutOfMemoryError("Java heap space, formatting the rejected payload");
    }
  }

  /**
   * The dead-letter handler throws an Error (an OutOfMemoryError as it copies a large record, a
   * serializer's StackOverflowError) on its first try for a record without its key: a dead letter
   * not written, as for an exception, so the partition is held at the record and the same loop
   * writes the dead letter on its next try. Before, the loop ended on it, and every loop the
   * application started again met the record first: none of its partitions was consumed meanwhile.
   */
  @Test
  void anErrorFromTheDeadLetterHandlerHoldsItsRecordAndTheSameLoopWritesItNext() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    send(0, 2);
    fixture.producer().send(new ProducerRecord<>(fixture.topic(), 0, null, "no order number"));
    send(3, 5);
    AtomicInteger tries = new AtomicInteger();
    try (IdempotentExecutor executor = executor(fixture.store())) {
      DedupPollLoop<String, String> loop =
          LoopFixture.quick(
                  DedupPollLoop.builder(
                      TestKafka.consumerConfig(fixture.group()),
                      List.of(fixture.topic()),
                      IdempotentRecordHandler.<String, String>builder(executor)
                          .bizType(BIZ_TYPE)
                          .key(KeyExtractors.header(KEY_HEADER))
                          .handler(this::apply)
                          .build()))
              .closeTimeout(Duration.ofSeconds(10))
              .deadLetterHandler(
                  (record, reason) -> {
                    if (tries.incrementAndGet() == 1) {
                      throw new OutOfMemoryError("Java heap space");
                    }
                    deadLettered.add(record);
                  })
              .build();
      TopicPartition partition = new TopicPartition(fixture.topic(), 0);
      try (RunningLoop running = RunningLoop.start(loop)) {
        await()
            .atMost(WAIT)
            .until(
                () ->
                    !running.isRunning()
                        || Long.valueOf(5L)
                            .equals(TestKafka.committedOffsets(fixture.group()).get(partition)));
        assertThat(running.isRunning())
            .as("the loop goes on past the dead-letter handler's Error")
            .isTrue();
      }
    }
    assertThat(tries).as("tries of the dead letter: the Error, then written").hasValue(2);
    assertThat(deadLettered).extracting(ConsumerRecord::offset).containsExactly(2L);
    assertThat(effects).hasSize(4);
    assertThat(effects.values()).allSatisfy(n -> assertThat(n).hasValue(1));
  }

  @Test
  void anErrorOnTheOutcomeWriterThreadDoesNotStopTheLoop() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    send(0, 20);
    ErrorOnceDataSource faulty =
        new ErrorOnceDataSource(fixture.dataSource(), "consumer-dedup-outcome-writer");
    try (IdempotentExecutor executor = executor(JdbcDedupStore.builder(faulty).build());
        RunningLoop loop = RunningLoop.start(loop(executor, true, this::apply))) {
      LoopFixture.awaitCommitted(
          fixture.group(), Map.of(new TopicPartition(fixture.topic(), 0), 20L));
      assertThat(faulty.thrown).as("the writer met the Error").isTrue();
      assertThat(loop.isRunning()).isTrue();
      assertThat(executor.unrecordedOutcomes()).isEmpty();
    }
    assertEachAppliedOnceAndSuccess(20);
  }

  @Test
  void anErrorWhileFailedIsWrittenLeavesNoKeyInProgressForGood() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    send(0, 10);
    // The handler of order 3 fails once, and the FAILED write that follows on the loop's thread
    // meets an OutOfMemoryError from getConnection.
    AtomicReference<Thread> failing = new AtomicReference<>();
    ErrorOnceDataSource faulty =
        new ErrorOnceDataSource(fixture.dataSource(), thread -> thread == failing.get());
    RecordHandler<String, String> work =
        record -> {
          if (LoopFixture.orderNo(record).equals(order(3))
              && failing.compareAndSet(null, Thread.currentThread())) {
            throw new IllegalStateException("payment declined");
          }
          apply(record);
        };
    List<Throwable> ended = new CopyOnWriteArrayList<>();
    AtomicReference<DedupPollLoop<String, String>> current = new AtomicReference<>();
    AtomicBoolean stopping = new AtomicBoolean();
    try (IdempotentExecutor executor = executor(JdbcDedupStore.builder(faulty).build())) {
      // As an application does: a loop that ends with an Error is replaced by a new one.
      Future<?> application =
          threads.submit(
              () -> {
                while (!stopping.get()) {
                  DedupPollLoop<String, String> loop = loop(executor, true, work);
                  current.set(loop);
                  if (stopping.get()) {
                    loop.close();
                    return;
                  }
                  try {
                    loop.run();
                  } catch (Throwable e) {
                    ended.add(e);
                  }
                }
              });
      try {
        LoopFixture.awaitCommitted(
            fixture.group(), Map.of(new TopicPartition(fixture.topic(), 0), 10L));
      } finally {
        stopping.set(true);
        current.get().close();
        application.get(30, TimeUnit.SECONDS);
      }
      assertThat(faulty.thrown).as("the FAILED write met the Error").isTrue();
      assertThat(executor.unrecordedOutcomes()).isEmpty();
    }
    // The handler's own failure was retried as any other; the Error did not end the loop.
    assertThat(ended).as("loops ended by an Error").isEmpty();
    assertEachAppliedOnceAndSuccess(10);
    assertThat(row(3).orElseThrow().attempts()).isEqualTo(2);
    assertThat(deadLettered).isEmpty();
  }

  @Test
  void closingTheExecutorMidPollWritesItsMarksAndHoldsLaterRecords() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    send(0, 10);
    CountDownLatch closed = new CountDownLatch(1);
    IdempotentExecutor first = executor(fixture.store());
    RecordHandler<String, String> work =
        record -> {
          if (LoopFixture.orderNo(record).equals(order(5)) && closed.getCount() > 0) {
            // The application shuts the executor down while this poll is being handled.
            threads.submit(
                () -> {
                  first.close();
                  closed.countDown();
                });
            assertThat(closed.await(10, TimeUnit.SECONDS)).isTrue();
          }
          apply(record);
        };
    try (RunningLoop loop = RunningLoop.start(loop(first, true, work))) {
      LoopFixture.awaitCommitted(
          fixture.group(), Map.of(new TopicPartition(fixture.topic(), 0), 10L));
      send(10, 13);
      Thread.sleep(1_500); // several polls, each refused by the closed executor
      assertThat(loop.isRunning()).isTrue();
      assertThat(deadLettered).as("held, not failed or dead-lettered").isEmpty();
      assertThat(effects).hasSize(10);
    }
    assertThat(closed.getCount()).as("closed mid-poll").isZero();
    try (IdempotentExecutor second = executor(fixture.store());
        RunningLoop loop = RunningLoop.start(loop(second, true, this::apply))) {
      LoopFixture.awaitCommitted(
          fixture.group(), Map.of(new TopicPartition(fixture.topic(), 0), 13L));
    }
    assertEachAppliedOnceAndSuccess(13);
    assertThat(deadLettered).isEmpty();
  }

  @Test
  void aSettleThatThrowsDeliversThePollAgainInsteadOfMovingPastIt() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    send(0, 5);
    // A processor that records its outcomes at settle (a buffered sink); its first flush fails.
    List<String> sink = new CopyOnWriteArrayList<>();
    AtomicBoolean failed = new AtomicBoolean();
    RecordProcessor<String, String> buffered =
        new RecordProcessor<>() {
          private final List<String> buffer = new ArrayList<>();

          @Override
          public Outcome process(ConsumerRecord<String, String> record) {
            buffer.add(LoopFixture.orderNo(record));
            return Outcome.PROCESSED;
          }

          @Override
          public List<ConsumerRecord<String, String>> settle() {
            List<String> flushed = List.copyOf(buffer);
            buffer.clear();
            if (!flushed.isEmpty() && failed.compareAndSet(false, true)) {
              throw new IllegalStateException("sink unavailable");
            }
            sink.addAll(flushed);
            return List.of();
          }
        };
    try (RunningLoop loop = RunningLoop.start(loop(buffered, 3))) {
      await().atMost(WAIT).untilTrue(failed);
      send(5, 10);
      LoopFixture.awaitCommitted(
          fixture.group(), Map.of(new TopicPartition(fixture.topic(), 0), 10L));
    }
    List<String> expected = new ArrayList<>();
    for (int i = 0; i < 10; i++) {
      expected.add(order(i));
    }
    assertThat(sink).as("no record lost").containsAll(expected);
  }

  /**
   * A poll's settle fails while its partition is held at an earlier record whose SUCCESS is not
   * written: the marks of the poll before were refused, and the consumer had the next records
   * fetched already, so the poll returned them and the loop skipped them. The failed settle held
   * each partition at the poll's first record, which sought the partition forward, past the records
   * held: the loop then committed past them while their SUCCESS was still not written.
   */
  @Test
  void aSettleThatThrowsDoesNotMoveAPartitionPastARecordWhoseMarkIsNotWritten() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    TopicPartition partition = new TopicPartition(fixture.topic(), 0);
    send(0, 10);
    SuccessRefusingStore refusingStore = new SuccessRefusingStore(fixture.store());
    List<String> processed = new CopyOnWriteArrayList<>();
    AtomicInteger settles = new AtomicInteger();
    AtomicReference<List<String>> failedSettlePoll = new AtomicReference<>();
    AtomicInteger processedAtFailedSettle = new AtomicInteger(-1);
    try (IdempotentExecutor executor = executor(refusingStore.store())) {
      IdempotentRecordHandler<String, String> handler =
          IdempotentRecordHandler.<String, String>builder(executor)
              .bizType(BIZ_TYPE)
              .key(KeyExtractors.header(KEY_HEADER))
              .handler(this::apply)
              .build();
      RecordProcessor<String, String> failingSecondSettle =
          new RecordProcessor<>() {
            private List<String> poll = List.of();

            @Override
            public Outcome process(ConsumerRecord<String, String> record) {
              processed.add(LoopFixture.orderNo(record));
              return handler.process(record);
            }

            @Override
            public void prepare(List<ConsumerRecord<String, String>> records) {
              poll = records.stream().map(LoopFixture::orderNo).toList();
              handler.prepare(records);
            }

            @Override
            public List<ConsumerRecord<String, String>> settle() {
              List<ConsumerRecord<String, String>> unrecorded = handler.settle();
              if (settles.incrementAndGet() == 2) {
                failedSettlePoll.set(poll);
                processedAtFailedSettle.set(processed.size());
                throw new IllegalStateException("settle failed (injected)");
              }
              return unrecorded;
            }
          };
      Map<String, Object> config = new HashMap<>(TestKafka.consumerConfig(fixture.group()));
      config.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 5);
      DedupPollLoop<String, String> loop =
          LoopFixture.quick(
                  DedupPollLoop.builder(config, List.of(fixture.topic()), failingSecondSettle))
              .closeTimeout(Duration.ofSeconds(10))
              .deadLetterHandler((record, reason) -> deadLettered.add(record))
              .build();
      try (RunningLoop running = RunningLoop.start(loop)) {
        await().atMost(WAIT).until(() -> failedSettlePoll.get() != null);
        assertThat(refusingStore.refusals).as("SUCCESS marks refused").hasPositiveValue();
        assertThat(failedSettlePoll.get())
            .as("the poll whose settle failed: the records fetched after the first five")
            .containsExactly(order(5), order(6), order(7), order(8), order(9));
        assertThat(processedAtFailedSettle)
            .as("none of them processed: the partition held at a record whose mark was refused")
            .hasValue(5);

        Thread.sleep(2_000); // several hold back-offs
        long committed = TestKafka.committedOffsets(fixture.group()).getOrDefault(partition, 0L);
        for (int i = 0; i < committed; i++) {
          assertThat(row(i).orElseThrow().status())
              .as("%s, committed past (offset %s committed)", order(i), committed)
              .isEqualTo(DedupStatus.SUCCESS);
        }

        refusingStore.refusing = false;
        LoopFixture.awaitCommitted(fixture.group(), Map.of(partition, 10L));
      }
    }
    assertEachAppliedOnceAndSuccess(10);
    assertThat(deadLettered).isEmpty();
  }

  /** A DataSource whose getConnection throws an OutOfMemoryError once on the chosen thread. */
  private static final class ErrorOnceDataSource implements DataSource {
    private final DataSource delegate;
    private final Predicate<Thread> on;
    volatile boolean thrown;

    ErrorOnceDataSource(DataSource delegate, String threadName) {
      this(delegate, thread -> thread.getName().startsWith(threadName));
    }

    ErrorOnceDataSource(DataSource delegate, Predicate<Thread> on) {
      this.delegate = delegate;
      this.on = on;
    }

    @Override
    public Connection getConnection() throws SQLException {
      if (!thrown && on.test(Thread.currentThread())) {
        thrown = true;
        throw new OutOfMemoryError("Java heap space (injected)");
      }
      return delegate.getConnection();
    }

    @Override
    public Connection getConnection(String username, String password) throws SQLException {
      return delegate.getConnection(username, password);
    }

    @Override
    public PrintWriter getLogWriter() throws SQLException {
      return delegate.getLogWriter();
    }

    @Override
    public void setLogWriter(PrintWriter out) throws SQLException {
      delegate.setLogWriter(out);
    }

    @Override
    public void setLoginTimeout(int seconds) throws SQLException {
      delegate.setLoginTimeout(seconds);
    }

    @Override
    public int getLoginTimeout() throws SQLException {
      return delegate.getLoginTimeout();
    }

    @Override
    public Logger getParentLogger() {
      return Logger.getLogger(Logger.GLOBAL_LOGGER_NAME);
    }

    @Override
    public <T> T unwrap(Class<T> iface) throws SQLException {
      return delegate.unwrap(iface);
    }

    @Override
    public boolean isWrapperFor(Class<?> iface) throws SQLException {
      return delegate.isWrapperFor(iface);
    }
  }

  /**
   * The wait for a poll's SUCCESS marks ends on an Error (its WARN line, that a mark was not
   * written in time, cannot be formatted for want of memory) while a mark is still being written.
   * The loop ends on it, and its last commit went past the record whose SUCCESS was not written:
   * had the process died then, the record was never delivered again, its key PROCESSING until its
   * lease ran out.
   */
  @Test
  void anErrorAsThePollsMarksAreAwaitedCommitsNothingPastARecordWhoseMarkIsNotWritten()
      throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    send(0, 1);
    CountDownLatch writerHeld = new CountDownLatch(1);
    CountDownLatch releaseWriter = new CountDownLatch(1);
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.BEFORE_SUCCESS_MARK
              && Thread.currentThread().getName().equals("consumer-dedup-outcome-writer")) {
            writerHeld.countDown();
            try {
              releaseWriter.await(30, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
              Thread.currentThread().interrupt();
            }
          }
        });
    try (IdempotentExecutor executor = executor(fixture.store());
        ThrowingLog unformattable =
            ThrowingLog.on(
                DedupPollLoop.class.getName(),
                "{} SUCCESS marks of the poll not written",
                () -> new OutOfMemoryError("Java heap space"))) {
      try {
        Future<?> run = threads.submit(loop(executor, true, this::apply));

        assertThat(endOf(run)).as("how run() ended").isInstanceOf(OutOfMemoryError.class);
        assertThat(writerHeld.getCount()).as("the mark was being written").isZero();
        assertThat(row(0).orElseThrow().status())
            .as("the record's key as the loop ended")
            .isEqualTo(DedupStatus.PROCESSING);
        assertThat(TestKafka.committedOffsets(fixture.group()))
            .as("nothing committed past the record whose SUCCESS is not written")
            .doesNotContainEntry(new TopicPartition(fixture.topic(), 0), 1L);
      } finally {
        releaseWriter.countDown();
      }
    } finally {
      FaultPoints.install(null);
    }
  }
}
