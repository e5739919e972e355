// Longer than 500 lines on purpose: a fifth is the class javadoc (the loop's manual), a fifth the
// public Builder, which stays nested as API (its settings, shared with DedupShareLoop's, are
// LoopSettings). Besides its life and the order of a poll's events, what the loop does lives in
// PartitionHolds, DeadLettering, PollClaims and OffsetCommits.
package io.consumerdedup.kafka;

import io.consumerdedup.core.DedupInProgressException;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.Disposition;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.core.internal.FailureTexts;
import io.consumerdedup.core.internal.Latches;
import java.time.Duration;
import java.util.Collection;
import java.util.ConcurrentModificationException;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.RecordDeserializationException;
import org.apache.kafka.common.errors.WakeupException;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A poll loop for plain kafka-clients consumers that runs each record through a {@link
 * RecordProcessor}, usually an {@link IdempotentRecordHandler}, and commits an offset only past
 * records that are done. (A little over 500 lines: its public {@link Builder} must stay nested;
 * what the loop does at each step lives in package-private classes, listed in docs/building.md.)
 *
 * <pre>{@code
 * Map<String, Object> consumerConfig = Map.of(
 *     ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, "kafka:9092",
 *     ConsumerConfig.GROUP_ID_CONFIG, "billing",
 *     ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false,   // required: the loop commits
 *     ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest",
 *     ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class,
 *     ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
 *
 * IdempotentExecutor executor =
 *     IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build()).build();
 * IdempotentRecordHandler<String, String> payments = IdempotentRecordHandler
 *     .<String, String>builder(executor)
 *     .bizType("payment")
 *     .key(KeyExtractors.header("order-no"))
 *     .groupId("billing")
 *     .handler(record -> charge(record.value()))
 *     .build();
 *
 * Producer<String, String> dltProducer = new KafkaProducer<>(producerConfig); // acks=all
 * Producer<byte[], byte[]> rawDltProducer = new KafkaProducer<>(
 *     producerConfig, new ByteArraySerializer(), new ByteArraySerializer());
 * DedupPollLoop<String, String> loop = DedupPollLoop
 *     .builder(consumerConfig, List.of("payments"), payments)
 *     .deadLetterHandler(KafkaDeadLetterPublisher.builder(dltProducer)
 *         .rawProducer(rawDltProducer)
 *         .groupId("billing")
 *         .build())
 *     .build();
 *
 * ExecutorService pollThread = Executors.newSingleThreadExecutor();
 * pollThread.submit(loop);
 * Runtime.getRuntime().addShutdownHook(new Thread(() -> {
 *   loop.close();          // stops polling, commits what is done, closes the consumer, waits
 *   pollThread.shutdown();
 *   dltProducer.close();
 *   rawDltProducer.close();
 *   executor.close();
 * }));
 * }</pre>
 *
 * <p>What the loop does with each record, by what {@link RecordProcessor#process} does; an
 * exception is classified by {@link Disposition#of(Throwable)}:
 *
 * <ul>
 *   <li>returns PROCESSED or DUPLICATE: the record is done; its offset is committed once the
 *       SUCCESS marks of its poll are written: with {@code commitAsync} as the next poll begins
 *       (the loop fetches and claims the next poll while the marks commit, and waits for them
 *       before the next poll's first handler), with {@code commitSync} before a rebalance revokes
 *       the partition and when the loop stops.
 *   <li>throws a {@link Disposition#RETRY_LATER} exception, such as {@link
 *       DedupInProgressException} (another consumer holds a live lease on the key) or {@link
 *       DedupStoreUnavailableException} (the database is unreachable after the store's own
 *       retries): the partition is sought back to the record and paused for the hold back-off, then
 *       the record is tried again, as often as it takes. Other partitions keep moving. The record
 *       is neither lost nor skipped, and no attempt is counted.
 *   <li>throws a {@link Disposition#DEAD_LETTER} exception (a missing, malformed or conflicting
 *       key; data the store refuses): a redelivery would carry the same data, so the record goes to
 *       the {@link DeadLetterHandler} at once, and the loop moves on.
 *   <li>throws anything else, {@link Disposition#HANDLER_FAILED} (the handler failed; the record is
 *       FAILED in the dedup table): the partition is sought back and paused for the retry back-off,
 *       and the record is tried again, up to {@link Builder#maxAttempts(int)} attempts in all; then
 *       it goes to the {@link DeadLetterHandler}, and the loop moves on. The attempt number is the
 *       larger of the loop's own count and {@link RecordProcessor#attempts}, which for an {@link
 *       IdempotentRecordHandler} is the dedup table's count of the key's claims: a restart, a
 *       rebalance or another consumer does not grant the record a fresh set of attempts. If that
 *       count cannot be read, the loop's own count decides. Nor does a restart before the record's
 *       dead letter was written: a later delivery of a key whose attempts the table counts as spent
 *       does not run the handler; the {@link IdempotentRecordHandler} gives its claim back and
 *       throws a {@link io.consumerdedup.core.DedupAttemptsExhaustedException}, dead-lettered at
 *       once.
 *   <li>throws an {@link Error} ({@code StackOverflowError}, {@code NoClassDefFoundError}, {@code
 *       AssertionError}...): counted as a handler failure, as above (dead-lettered, as a {@link
 *       HandlerErrorException}, once its attempts are spent); then the loop settles the poll (the
 *       claims of the records it did not get to are given back, the SUCCESS marks of those it did
 *       are awaited), commits the offsets of the records that are done, closes the consumer, and
 *       {@link #run()} throws the Error. The application sees it (the {@code Future} of {@code
 *       ExecutorService.submit(loop)} fails with it) and starts a new loop, or restarts, to go on.
 * </ul>
 *
 * <p>A record whose key or value the consumer's deserializer rejects never reaches the processor:
 * {@code poll} throws a {@link RecordDeserializationException}. The loop passes the record's raw
 * bytes, headers, timestamp and coordinates to {@link
 * DeadLetterHandler#deadLetterUndeserializable}, then moves that partition past the record and
 * commits past it like any record that is done. Other partitions are not held up: the consumer
 * throws only once it has returned the records before the bad one.
 *
 * <p>The loop commits past a dead-lettered record only after the dead-letter handler returned; if
 * that throws, an {@link Error} included, the record is held like an in-progress one (and logged at
 * ERROR with its coordinates) and dead-lettered again later. Back-offs pause the partition instead
 * of sleeping, so the consumer keeps polling and stays in its group.
 *
 * <p>The consumer must not auto-commit ({@code enable.auto.commit=false}), or it would commit past
 * records that are not done. {@link #builder(Map, Collection, RecordProcessor)} checks the
 * configuration; with {@link #builder(Consumer, Collection, RecordProcessor)} that is the caller's
 * duty. The loop owns the consumer: it subscribes it to the topics, and closes it when it stops. No
 * other thread may use it meanwhile, and a consumer is run by one loop at a time: a loop holds its
 * consumer object while {@link #run()} runs, and building or running a second loop on it meanwhile
 * throws, before the consumer is touched (a consumer is not safe for multi-threaded access, and two
 * loops on one lose records). A loop built and never run holds nothing; closing it closes its
 * consumer unless another loop runs it. Choose {@code max.poll.interval.ms} longer than the time to
 * handle one poll's records ({@code max.poll.records} of them).
 *
 * <p>{@link #run()} polls until {@link #stop()} or {@link #close()} is called from another thread
 * (or the thread is interrupted); it then commits the offsets of the records that are done and
 * closes the consumer. A loop runs once.
 */
public final class DedupPollLoop<K, V> implements Runnable, AutoCloseable {

  /** Default longest time one poll waits for records. */
  public static final Duration DEFAULT_POLL_TIMEOUT = LoopSettings.DEFAULT_POLL_TIMEOUT;

  /** Default number of times a failing handler is run for one record before it is dead-lettered. */
  public static final int DEFAULT_MAX_ATTEMPTS = LoopSettings.DEFAULT_MAX_ATTEMPTS;

  /** Default wait between two attempts of a failing handler. */
  public static final Duration DEFAULT_RETRY_BACKOFF = LoopSettings.DEFAULT_RETRY_BACKOFF;

  /** Default first wait before a record that could not be handled yet is tried again. */
  public static final Duration DEFAULT_HOLD_BACKOFF = LoopSettings.DEFAULT_HOLD_BACKOFF;

  /** Default longest wait before a record that could not be handled yet is tried again. */
  public static final Duration DEFAULT_MAX_HOLD_BACKOFF = LoopSettings.DEFAULT_MAX_HOLD_BACKOFF;

  /** Default longest time {@link #close()} waits for the loop to stop. */
  public static final Duration DEFAULT_CLOSE_TIMEOUT = LoopSettings.DEFAULT_CLOSE_TIMEOUT;

  private static final Logger log = LoggerFactory.getLogger(DedupPollLoop.class);

  /**
   * What {@link #close()} waits beyond the loop's own bound on its last commit and its consumer's
   * close (the close timeout): a consumer's close may overrun the time it is given a little.
   */
  private static final Duration CLOSE_GRACE = Duration.ofSeconds(5);

  /**
   * The consumers that loops run now, each with its loop, told apart by identity: a consumer class
   * whose equals compares its configuration took a second consumer for the first. A loop holds its
   * consumer from the start of {@link #run()} to its end (or through {@link #close()} when it never
   * ran), so that one built and dropped without running holds nothing, whenever the garbage
   * collector comes.
   */
  private static final Map<Consumer<?, ?>, DedupPollLoop<?, ?>> RUNNING = new IdentityHashMap<>();

  /**
   * Two loops on one consumer poll it from two threads: kafka-clients refuses one's call while the
   * other is inside one, and lets it through while the other runs its handler. The second loop's
   * subscribe replaced the first one's rebalance listener, a poll ended by the refusal could not
   * seek back the records it had not reached, and the other loop's commits went past them.
   */
  private static final String SHARED_CONSUMER =
      "This consumer is run by another DedupPollLoop, which polls, commits and closes it; a"
          + " KafkaConsumer is not safe for multi-threaded access, and two loops on one consumer"
          + " lose records. Give each loop its own consumer";

  private final Consumer<K, V> consumer;
  private final List<String> topics;
  private final RecordProcessor<K, V> processor;
  private final String groupId;
  private final Duration pollTimeout;
  private final Duration closeTimeout;
  private final int maxAttempts;

  private final AtomicBoolean started = new AtomicBoolean();
  private final CountDownLatch handlingEnded = new CountDownLatch(1);
  private final CountDownLatch finished = new CountDownLatch(1);
  private volatile boolean running = true;
  private volatile @Nullable Thread loopThread;

  // The fields below are touched by the loop thread only (rebalance callbacks run inside poll).
  private final PartitionProgress progress = new PartitionProgress();
  private final PartitionHolds holds;
  private final DeadLettering<K, V> deadLetters;
  private final PollClaims<K, V> pollClaims;
  private final OffsetCommits commits;
  private final @Nullable RecordsOlderThanRetention olderThanRetention;

  private DedupPollLoop(
      Builder<K, V> builder,
      Consumer<K, V> consumer,
      String groupId,
      DeadLetterHandler<K, V> deadLetterHandler) {
    LoopSettings<K, V> settings = builder.settings;
    this.consumer = consumer;
    this.groupId = groupId;
    this.topics = builder.topics;
    this.processor = builder.processor;
    this.pollTimeout = settings.pollTimeout();
    this.closeTimeout = settings.closeTimeout();
    this.maxAttempts = settings.maxAttempts();
    this.holds =
        new PartitionHolds(
            consumer, progress, settings.holdBackOff(), settings.maxHoldBackOff(), groupId);
    this.deadLetters =
        new DeadLettering<>(
            consumer,
            deadLetterHandler,
            processor,
            progress,
            holds,
            settings.maxAttempts(),
            settings.retryBackOff(),
            groupId);
    this.pollClaims = new PollClaims<>(consumer, processor, progress, holds);
    this.commits = new OffsetCommits(consumer, progress, pollClaims);
    this.olderThanRetention = RecordsOlderThanRetention.of(consumer, processor, groupId);
  }

  /**
   * Starts building a loop over a consumer the caller made. It must have a {@code group.id} and
   * {@code enable.auto.commit=false} (which this method cannot check). The loop subscribes it and
   * closes it.
   *
   * @param processor what runs for each record: usually an {@link IdempotentRecordHandler}; any
   *     other processor, such as a lambda, has its attempts counted by the loop only, in memory
   */
  public static <K, V> Builder<K, V> builder(
      Consumer<K, V> consumer, Collection<String> topics, RecordProcessor<K, V> processor) {
    return new Builder<>(Objects.requireNonNull(consumer, "consumer"), null, topics, processor);
  }

  /**
   * Starts building a loop over a {@link KafkaConsumer} made from {@code consumerConfig} when
   * {@link Builder#build()} is called (its deserializers must produce {@code K} and {@code V}).
   *
   * @param processor what runs for each record: usually an {@link IdempotentRecordHandler}; any
   *     other processor, such as a lambda, has its attempts counted by the loop only, in memory
   * @throws IllegalArgumentException if the configuration has no {@code group.id}, or does not set
   *     {@code enable.auto.commit} to false (Kafka's default is true)
   */
  public static <K, V> Builder<K, V> builder(
      Map<String, Object> consumerConfig,
      Collection<String> topics,
      RecordProcessor<K, V> processor) {
    Objects.requireNonNull(consumerConfig, "consumerConfig");
    return new Builder<>(null, OffsetCommits.checkedConfig(consumerConfig), topics, processor);
  }

  /**
   * Polls and handles records until {@link #stop()} or {@link #close()} is called, or the thread is
   * interrupted; then commits the offsets of the records that are done and closes the consumer.
   *
   * @throws IllegalStateException if the loop was already started or closed, or another loop runs
   *     its consumer (which this loop then leaves untouched)
   * @throws Error what the processor threw, once the poll is settled and the consumer closed
   */
  @Override
  public void run() {
    if (!started.compareAndSet(false, true)) {
      throw new IllegalStateException("A DedupPollLoop runs once; this one was started or closed");
    }
    if (!holdConsumer()) {
      // Not subscribed, polled nor closed: the consumer is the other loop's.
      handlingEnded.countDown();
      finished.countDown();
      throw new IllegalStateException(SHARED_CONSUMER);
    }
    loopThread = Thread.currentThread();
    boolean interrupted = false;
    Error fatal = null;
    try {
      // Inside the try: an OutOfMemoryError setting it left the consumer held by this loop for
      // good, every later loop on it refused and close() waiting out its timeout.
      LoopAttemptLimit.setOnThisThread(maxAttempts);
      consumer.subscribe(topics, new RebalanceListener());
      log.info("Polling {} in group {}", topics, groupId);
      while (running) {
        try {
          pollOnce();
        } catch (WakeupException e) {
          if (running) {
            log.debug("Ignoring a wakeup that was not a stop request");
          }
        }
      }
    } catch (InterruptException e) {
      // Kafka re-sets the interrupt flag; clear it so the last commit and close can run.
      Thread.interrupted();
      interrupted = true;
      log.info("Poll loop of {} interrupted; stopping", topics);
    } catch (Error e) {
      fatal = e;
      log.error(
          "Poll loop of {} in group {} ends with an Error; the claims of its last poll are"
              + " settled and nothing is committed past a record that is not done. The"
              + " application must start a new loop (or restart) to go on consuming",
          topics,
          groupId,
          // Printed by Logback: an Error whose getMessage() throws replaced itself with that
          // throw here, and the application was handed it instead of the Error.
          FailureTexts.loggable(e));
      throw e;
    } finally {
      running = false;
      try {
        if (commitLastAndClose()) {
          interrupted = true;
        }
        log.info("Stopped polling {} in group {}", topics, groupId);
      } catch (RuntimeException e) {
        if (fatal == null) {
          throw e;
        }
        fatal.addSuppressed(e); // the Error is what the application must see
      } finally {
        releaseConsumer();
        LoopAttemptLimit.clearOnThisThread();
        finished.countDown();
        if (interrupted) {
          Thread.currentThread().interrupt();
        }
      }
    }
  }

  /**
   * Commits what is done and closes the consumer, whatever the commit throws: a consumer left open
   * stays in its group, holding its partitions from the next consumer until it is timed out. Both
   * are over within the close timeout, which {@link #close()} waits for.
   *
   * @return whether the commit was interrupted (made again, the flag cleared meanwhile)
   */
  private boolean commitLastAndClose() {
    handlingEnded.countDown();
    commits.stopBy(System.nanoTime() + closeTimeout.toNanos());
    try {
      try {
        commits.commitLast();
        return false;
      } catch (InterruptException e) {
        // An interrupt as the loop stops (its executor shut down at once): the offsets are owed
        // all the same.
        Thread.interrupted();
        commits.commitLast();
        return true;
      }
    } finally {
      consumer.close(CloseOptions.timeout(commits.untilStopDeadline()));
    }
  }

  /**
   * Asks the loop to stop, from any thread; returns at once. The record being handled is finished
   * first.
   */
  public void stop() {
    running = false;
    if (!runByAnotherLoop()) {
      consumer.wakeup();
    }
  }

  /** Holds the consumer for this loop, unless another loop runs it; returns whether it did. */
  private boolean holdConsumer() {
    synchronized (RUNNING) {
      return RUNNING.putIfAbsent(consumer, this) == null;
    }
  }

  private void releaseConsumer() {
    synchronized (RUNNING) {
      RUNNING.remove(consumer, this);
    }
  }

  private boolean runByAnotherLoop() {
    synchronized (RUNNING) {
      DedupPollLoop<?, ?> holder = RUNNING.get(consumer);
      return holder != null && holder != this;
    }
  }

  /**
   * @param cause what the consumer answered to a call that met the loop running it, if one did
   */
  private static void refuseIfRunning(Consumer<?, ?> consumer, @Nullable Throwable cause) {
    synchronized (RUNNING) {
      if (RUNNING.containsKey(consumer)) {
        throw new IllegalStateException(SHARED_CONSUMER, cause);
      }
    }
  }

  /**
   * Stops the loop and waits for it to commit and close the consumer: up to the close timeout for
   * the record in hand to be finished, then up to the close timeout again for the last commit and
   * the consumer's close, which the loop bounds by it (a broker that no longer answers does not
   * keep the loop stopping after {@code close()} returned). A loop that never ran closes its
   * consumer here, unless another loop runs it. Called from the handler (the loop's own thread), it
   * only asks the loop to stop. An interrupt of the calling thread does not cut the wait short; it
   * is set on the thread again on return.
   */
  @Override
  public void close() {
    stop();
    if (Thread.currentThread() == loopThread) {
      return;
    }
    // A caller already interrupted (a shutdown on a thread of an executor stopped with shutdownNow)
    // got close() back at once while the handler in hand ran, and went on to close the executor and
    // DataSource under it: its SUCCESS was never written. The interrupt is kept for when this
    // returns.
    boolean interrupted = Thread.interrupted();
    try {
      if (started.compareAndSet(false, true)) {
        // Held while it is closed, so that no loop starts running it meanwhile; one that runs it
        // already keeps it, to close it itself.
        boolean held = holdConsumer();
        try {
          if (held) {
            consumer.close(CloseOptions.timeout(closeTimeout));
          }
        } finally {
          if (held) {
            releaseConsumer();
          }
          handlingEnded.countDown();
          finished.countDown();
        }
        return;
      }
      long handlingDeadline = System.nanoTime() + closeTimeout.toNanos();
      interrupted |= Latches.awaitThroughInterrupts(handlingEnded, handlingDeadline);
      if (handlingEnded.getCount() > 0) {
        log.warn(
            "Poll loop of {} did not stop within {}; its handler may still be running",
            topics,
            closeTimeout);
        return;
      }
      interrupted |=
          Latches.awaitThroughInterrupts(
              finished, System.nanoTime() + closeTimeout.toNanos() + CLOSE_GRACE.toNanos());
      if (finished.getCount() > 0) {
        log.warn(
            "Poll loop of {} did not close its consumer within {}; it is still stopping",
            topics,
            closeTimeout);
      }
    } finally {
      if (interrupted) {
        Thread.currentThread().interrupt();
      }
    }
  }

  /**
   * One poll, pipelined with the SUCCESS marks of the one before: its records are fetched and
   * claimed while those marks commit, and the marks are awaited before its first handler runs, and
   * before any commit. So at most the records of one poll are applied without their SUCCESS
   * written, whichever moment the process dies.
   */
  private void pollOnce() {
    holds.resumeDue();
    ConsumerRecords<K, V> records;
    try {
      // While marks are in flight, take the records the consumer has fetched already and claim
      // them first; wait for new ones only once everything handled is committed.
      records =
          consumer.poll(
              pollClaims.marksInFlight() ? Duration.ZERO : holds.pollTimeout(pollTimeout));
    } catch (RecordDeserializationException e) {
      // The consumer throws only when it has no records before the bad one to return, and leaves
      // that partition's position at it: no other record is lost, and only this partition waits.
      // The last poll's marks first: one not written holds its partition at an earlier record, and
      // this one comes again after it; dead-lettered now, it was dead-lettered a second time then.
      pollClaims.awaitMarks();
      deadLetters.undeserializable(e);
      commits.commitDone();
      return;
    }
    if (olderThanRetention != null) {
      olderThanRetention.polled(records);
    }
    if (records.isEmpty()) {
      commits.commitDone();
      return;
    }
    boolean allReached;
    try {
      // Inside the try: an Error from a processor around the handler, after the handler claimed
      // the poll, left those claims unsettled, renewed for as long as the executor lived.
      pollClaims.prepare(records);
      commits.commitDone(); // the last poll's: its marks were written while this one was claimed
      pollClaims.open();
      allReached = handleAll(records);
    } catch (RuntimeException | Error e) {
      // A stop's wakeup in the commit, or an Error that ends the loop: first the poll's claims are
      // ended or given back (their renewals stop), or no other consumer could take those keys up
      // for as long as this JVM lives; the marks are awaited by the last commit.
      try {
        seekBackUnreached(records);
      } catch (RuntimeException | Error again) {
        e.addSuppressed(again);
      }
      try {
        pollClaims.settle(records);
      } catch (RuntimeException | Error again) {
        e.addSuppressed(again);
      }
      throw e;
    }
    try {
      if (!allReached) {
        seekBackUnreached(records);
      }
    } finally {
      pollClaims.settle(records); // a seek that fails must not leave the claims renewed
    }
  }

  /**
   * Seeks each partition the loop left before the end of the poll (a stop, an Error, a wakeup) back
   * to its first record not done. The consumer's position is past the whole poll, and a consumer
   * that commits by itself (one the application made, with {@code enable.auto.commit} left at
   * kafka-clients' default) commits its position at the next poll and as it closes: the records
   * left were never delivered again. A partition paused meanwhile was sought back by its hold.
   * Worked out here, from the poll and what is done, rather than kept up on each record.
   */
  private void seekBackUnreached(ConsumerRecords<K, V> records) {
    for (TopicPartition partition : records.partitions()) {
      if (progress.isPaused(partition)) {
        continue;
      }
      List<ConsumerRecord<K, V>> polled = records.records(partition);
      long first = polled.get(0).offset();
      OffsetAndMetadata done = progress.offsetsToCommit().get(partition);
      long next = done == null ? first : Math.max(first, done.offset());
      if (next > polled.get(polled.size() - 1).offset()) {
        continue; // every record of it done: the position is where it must be
      }
      try {
        consumer.seek(partition, next);
      } catch (RuntimeException e) {
        // A partition revoked meanwhile, say: the seeks of the others must still be made, or
        // their records left were committed past by a consumer that commits by itself.
        log.warn(
            "Could not seek {} back to offset {}, its first record not handled as the loop"
                + " stopped; a consumer that commits by itself may commit past it",
            partition,
            next,
            e);
      }
    }
  }

  /**
   * Handles the poll's records; false if the loop stopped before it reached the end of every
   * partition not paused.
   */
  private boolean handleAll(ConsumerRecords<K, V> records) {
    for (TopicPartition partition : records.partitions()) {
      if (progress.isPaused(partition)) {
        // Held since the poll returned (a mark of the last poll not written): sought back to
        // that record, so these come again.
        continue;
      }
      for (ConsumerRecord<K, V> record : records.records(partition)) {
        if (!running) {
          return false;
        }
        if (!handle(record, partition)) {
          // Sought back and paused: the rest of this partition's records come again later.
          break;
        }
        progress.done(partition, record.offset() + 1);
      }
    }
    return true;
  }

  /** Handles one record; false if it is not done, and its partition was sought back and paused. */
  private boolean handle(ConsumerRecord<K, V> record, TopicPartition partition) {
    PartitionProgress.Failure previous = progress.failureOf(partition, record.offset());
    if (previous != null && deadLetters.attemptsSpent(previous)) {
      // Its attempts ran out earlier, but the dead letter could not be written then.
      return deadLetters.deadLetter(record, partition, previous.last());
    }
    Outcome outcome;
    try {
      outcome = processor.process(record);
    } catch (RuntimeException e) {
      return switch (Disposition.of(e)) {
        case RETRY_LATER -> {
          holds.retryLater(record, partition, e);
          yield false;
        }
        case DEAD_LETTER -> deadLetters.notRetryable(record, partition, e);
        case HANDLER_FAILED -> deadLetters.handlerFailed(record, partition, previous, e);
      };
    } catch (Error e) {
      if (ErrorsBesideHandlers.wasBesideHandler(e)) {
        // Not the handler's (the record's claim answered by an OutOfMemoryError, say): no attempt
        // is counted and the record is not done. This loop ends on it; the next one takes the
        // claim up and runs the handler.
        throw e;
      }
      // A handler failure like any other (its claim is FAILED, the attempt counted), so that a
      // record whose handler always throws an Error is dead-lettered once its attempts are spent
      // instead of ending every loop the application starts; then this loop ends with it.
      if (deadLetters.handlerFailed(record, partition, previous, new HandlerErrorException(e))) {
        progress.done(partition, record.offset() + 1); // dead-lettered
      }
      throw e;
    }
    progress.settled(partition);
    progress.storeAnswered(System.nanoTime());
    if (outcome == Outcome.PROCESSED && olderThanRetention != null) {
      olderThanRetention.applied(record, partition);
    }
    return true;
  }

  private final class RebalanceListener implements ConsumerRebalanceListener {
    @Override
    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
      commits.commitBeforeRevoke();
      progress.forget(partitions);
      commits.forget(partitions);
    }

    @Override
    public void onPartitionsLost(Collection<TopicPartition> partitions) {
      progress.forget(partitions);
      commits.forget(partitions);
    }

    @Override
    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
      log.info("Assigned {} in group {}", partitions, groupId);
    }
  }

  /** Builds a {@link DedupPollLoop}; every setter validates its value at once. */
  public static final class Builder<K, V> {
    private final @Nullable Consumer<K, V> consumer;
    private final @Nullable Map<String, Object> consumerConfig;
    private final List<String> topics;
    private final RecordProcessor<K, V> processor;
    private final LoopSettings<K, V> settings = new LoopSettings<>();

    private Builder(
        @Nullable Consumer<K, V> consumer,
        @Nullable Map<String, Object> consumerConfig,
        Collection<String> topics,
        RecordProcessor<K, V> processor) {
      Objects.requireNonNull(topics, "topics");
      if (topics.isEmpty()) {
        throw new IllegalArgumentException("topics must not be empty");
      }
      for (String topic : topics) {
        if (topic == null || topic.isBlank()) {
          throw new IllegalArgumentException("topics must not contain a blank name: " + topics);
        }
      }
      this.consumer = consumer;
      this.consumerConfig = consumerConfig;
      this.topics = List.copyOf(topics);
      this.processor = Objects.requireNonNull(processor, "processor");
    }

    /**
     * Where records go that the loop gives up on, including those that cannot be deserialized
     * ({@link DeadLetterHandler#deadLetterUndeserializable}). Required: usually a {@link
     * KafkaDeadLetterPublisher} with a {@link KafkaDeadLetterPublisher.Builder#rawProducer raw
     * producer}.
     */
    public Builder<K, V> deadLetterHandler(DeadLetterHandler<K, V> deadLetterHandler) {
      settings.deadLetterHandler(deadLetterHandler);
      return this;
    }

    /**
     * How many times a failing handler runs for one record (the first attempt included) before the
     * record is dead-lettered, counting the attempts that {@link RecordProcessor#attempts} reports
     * (for an {@link IdempotentRecordHandler}: every attempt in the dedup table, before restarts
     * and on other consumers too). Default {@value #DEFAULT_MAX_ATTEMPTS}.
     */
    public Builder<K, V> maxAttempts(int maxAttempts) {
      settings.maxAttempts(maxAttempts);
      return this;
    }

    /** Wait between two attempts of a failing handler. Default {@link #DEFAULT_RETRY_BACKOFF}. */
    public Builder<K, V> retryBackOff(Duration retryBackOff) {
      settings.retryBackOff(retryBackOff);
      return this;
    }

    /**
     * Wait before a record that cannot be handled yet (another consumer's live lease, the dedup
     * store or the dead-letter handler failing) is tried again: {@code initial}, doubling on each
     * consecutive hold of the partition, at most {@code max}. A partition held because the dedup
     * store could not be reached is resumed, its back-off from the start, as soon as a record of
     * another partition is handled (the store answers again, after a failover, say). Defaults
     * {@link #DEFAULT_HOLD_BACKOFF} and {@link #DEFAULT_MAX_HOLD_BACKOFF}.
     *
     * @throws IllegalArgumentException if {@code initial} exceeds {@code max}
     */
    public Builder<K, V> holdBackOff(Duration initial, Duration max) {
      settings.holdBackOff(initial, max);
      return this;
    }

    /** Longest time one poll waits for records. Default {@link #DEFAULT_POLL_TIMEOUT}. */
    public Builder<K, V> pollTimeout(Duration pollTimeout) {
      settings.pollTimeout(pollTimeout);
      return this;
    }

    /**
     * Longest time {@link DedupPollLoop#close()} waits for the record in hand to be finished, and
     * longest time the loop's last offset commit and its consumer's close then take, which {@code
     * close()} waits for too. Default {@link #DEFAULT_CLOSE_TIMEOUT}.
     */
    public Builder<K, V> closeTimeout(Duration closeTimeout) {
      settings.closeTimeout(closeTimeout);
      return this;
    }

    /**
     * Builds the loop, creating the consumer if a configuration was given.
     *
     * @throws IllegalStateException if no dead-letter handler was set, the consumer has no group
     *     id, or another loop runs the consumer
     */
    public DedupPollLoop<K, V> build() {
      DeadLetterHandler<K, V> deadLetters =
          settings.requireDeadLetterHandler(
              "records that cannot be handled must go somewhere"
                  + " (for example KafkaDeadLetterPublisher.builder(producer).build())");
      settings.warnIfUndeserializableCannotBeDeadLettered(
          log, "such a record holds its partition, an ERROR at each try, until it can be written");
      if (consumer != null) {
        // Before anything asks the consumer: a call from this thread into a consumer another loop
        // polls is refused by kafka-clients (ConcurrentModificationException), or gets through
        // while that loop runs its handler.
        refuseIfRunning(consumer, null);
      }
      Consumer<K, V> built =
          consumer != null ? consumer : new KafkaConsumer<>(Objects.requireNonNull(consumerConfig));
      String groupId;
      try {
        groupId = OffsetCommits.groupOf(built, consumer == null);
      } catch (ConcurrentModificationException e) {
        // A loop began running the consumer after the check above, and kafka-clients refused this
        // call while that loop was inside the consumer: refused as the check refuses it, rather
        // than with kafka-clients' words, which name no loop.
        refuseIfRunning(built, e);
        throw e;
      }
      return new DedupPollLoop<>(this, built, groupId, deadLetters);
    }
  }
}
