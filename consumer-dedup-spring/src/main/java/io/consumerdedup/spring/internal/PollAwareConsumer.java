package io.consumerdedup.spring.internal;

import io.consumerdedup.core.internal.FailureTexts;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.function.Function;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetCommitCallback;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.WakeupException;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.core.Ordered;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * A listener container's consumer as consumer-dedup needs it for {@code @Idempotent} record
 * listeners that claim a poll's keys together ({@link ConsumerPoll}):
 *
 * <ul>
 *   <li>{@code poll} gives back the claims of the poll before whose listener never ran, then makes
 *       the new poll's records known to the listeners it delivers them to;
 *   <li>every offset commit goes only up to each partition's first record whose SUCCESS mark
 *       (written in the background, in groups) is not written yet ({@link SuccessMarks}); the rest
 *       goes with a later commit of any partition, or is committed before a later poll once the
 *       consumer is idle, once those marks are written. A commit does not wait for marks on their
 *       way: the next poll's listeners do, once they have claimed its keys ({@link
 *       ConsumerPoll#awaitEarlierMarks}); the commits of partitions being revoked, and of a
 *       consumer that closes, wait for them;
 *   <li>an offset commit made inside a transaction of the consumer's thread (a container with a
 *       database transaction manager commits a record's offset inside the record's transaction) is
 *       sent once that transaction has committed, and dropped if it does not commit;
 *   <li>no commit passes a record whose container transaction did not commit, until a transaction
 *       of that record or of a later one of its partition commits, or the consumer's position has
 *       passed it (it was given up): in ack modes other than {@code RECORD} and {@code
 *       MANUAL_IMMEDIATE}, spring-kafka commits the offsets it queued inside such a transaction
 *       after the poll, outside it ({@link #handedOverInTransaction});
 *   <li>an offset commit an {@code @Idempotent} batch listener makes through this consumer is sent
 *       once the outcomes of its batch are written, and dropped if the batch is not done ({@link
 *       #holdCommits});
 *   <li>the rebalance listener given to {@code subscribe} is wrapped, so that the claims and marks
 *       of revoked or lost partitions are let go once the container has committed what it could.
 * </ul>
 *
 * Everything else is the delegate's ({@link ForwardingConsumer}). A consumer whose listeners are
 * not {@code @Idempotent}, or claim one record at a time, has no marks: its commits pass straight
 * through, but for those made inside a transaction. Made by {@link
 * io.consumerdedup.spring.DedupConsumerPostProcessor}; and, for the one call of an {@code
 * Idempotent} batch listener, around a container's own consumer that is not one, only to hold the
 * commits the listener makes through it.
 */
public final class PollAwareConsumer<K, V> extends ForwardingConsumer<K, V> {
  private static final Logger log = LoggerFactory.getLogger(PollAwareConsumer.class);

  private final ConsumerPoll poll = new ConsumerPoll();

  /** Whether partitions are being revoked: their commits wait for the marks they pass. */
  private boolean revoking;

  /**
   * Whether a commit held runs now: one left to a transaction, the transaction committed, or one
   * held until a listener's outcomes were written.
   */
  private boolean committingAfterTransaction;

  /**
   * The commits the innermost {@code @Idempotent} call running made through this consumer, sent
   * once its outcomes are written ({@link #holdCommits}); null while none runs.
   */
  private @Nullable CommitHold heldForBatch;

  /** Whether the last poll returned no records: the container has nothing new to commit. */
  private boolean idle;

  /**
   * What a commit callback given to the delegate threw last: Kafka throws it from the next commit
   * or poll, where an {@code IllegalStateException} or a {@code KafkaException} of the
   * application's cannot otherwise be told from the commit's own failure.
   */
  private @Nullable Throwable callbackThrew;

  /** How long a poll waits for records before committing what is owed. */
  private static final Duration OWED_WAIT = Duration.ofMillis(100);

  /** Tells a held commit's callback it is dropped (CommitHold.release). */
  private static final EachRegardless.Step<PollAwareConsumer<?, ?>, List<HeldCommit>> DROP_HELD =
      (self, held, i) -> {
        Error thrown = held.get(i).dropped("the listener's call failed");
        if (thrown != null) {
          throw thrown;
        }
      };

  /** Sends a held commit (CommitHold.release). */
  private static final EachRegardless.Step<PollAwareConsumer<?, ?>, List<HeldCommit>> SEND_HELD =
      (self, held, i) -> self.releaseHeld(held.get(i));

  public PollAwareConsumer(Consumer<K, V> delegate) {
    super(delegate);
  }

  /** What the listeners of this consumer know of its last poll. */
  public ConsumerPoll poll() {
    return poll;
  }

  @Override
  public ConsumerRecords<K, V> poll(Duration timeout) {
    poll.ended();
    poll.marks().passedBy(this::positionIfAssigned);
    if (idle) {
      commitOwed();
    }
    ConsumerRecords<K, V> records;
    if (poll.marks().owes() && timeout.compareTo(OWED_WAIT) > 0) {
      // The container committed less than it asked (marks on their way): if no record comes
      // soon, the rest is committed now rather than after a whole poll timeout.
      long start = System.nanoTime();
      records = delegate.poll(OWED_WAIT);
      if (records.isEmpty()) {
        commitOwed();
        Duration left = timeout.minusNanos(System.nanoTime() - start);
        if (!left.isNegative() && !left.isZero()) {
          records = delegate.poll(left);
        }
      }
    } else {
      records = delegate.poll(timeout);
    }
    idle = records.isEmpty();
    poll.started(records);
    return records;
  }

  /**
   * Commits what earlier commits were asked to pass but could not, as far as the SUCCESS marks
   * written since allow, when the consumer is idle: the container, which believes it committed
   * them, has nothing new to commit. While records come, its next commit passes them.
   */
  private void commitOwed() {
    commitOwed(false, delegate.assignment());
  }

  /** As {@link #commitOwed()}, for {@code partitions}, waiting for their marks if {@code wait}. */
  private void commitOwed(boolean wait, Collection<TopicPartition> partitions) {
    Map<TopicPartition, OffsetAndMetadata> owed = poll.marks().owedNow(wait);
    if (owed.isEmpty()) {
      return;
    }
    owed.keySet().retainAll(partitions);
    if (owed.isEmpty()) {
      return;
    }
    try {
      delegate.commitSync(owed);
      poll.marks().committed(owed);
      // Routine whenever records come sparsely (each poll's marks are written after its commit).
      log.debug("Committed {} now that the SUCCESS marks before them are written", owed);
    } catch (WakeupException | InterruptException e) {
      // The container woke the consumer to end the poll (its stop does), or the thread was
      // interrupted: swallowed, the poll would go on for the rest of its timeout and the stop
      // wait it out. Kafka hands both on from a rebalance callback to the poll, as here.
      throw e;
    } catch (KafkaException | IllegalStateException e) {
      // The container's next commit, or this consumer's next poll, tries again.
      log.debug("Could not commit {}", owed, e);
    }
  }

  @Override
  public void commitSync() {
    if (passesStraightThrough()) {
      delegate.commitSync();
      return;
    }
    commitSync(positions());
  }

  @Override
  public void commitSync(Duration timeout) {
    if (passesStraightThrough()) {
      delegate.commitSync(timeout);
      return;
    }
    commitSync(positions(), timeout);
  }

  @Override
  public void commitSync(Map<TopicPartition, OffsetAndMetadata> offsets) {
    HeldCommit commit = HeldCommit.sync(() -> commitSync(offsets));
    if (heldForBatch(commit) || afterTransaction(commit)) {
      return;
    }
    Map<TopicPartition, OffsetAndMetadata> durable = durable(offsets);
    if (!durable.isEmpty()) {
      delegate.commitSync(durable);
      poll.marks().committed(durable);
    }
  }

  @Override
  public void commitSync(Map<TopicPartition, OffsetAndMetadata> offsets, Duration timeout) {
    HeldCommit commit = HeldCommit.sync(() -> commitSync(offsets, timeout));
    if (heldForBatch(commit) || afterTransaction(commit)) {
      return;
    }
    Map<TopicPartition, OffsetAndMetadata> durable = durable(offsets);
    if (!durable.isEmpty()) {
      delegate.commitSync(durable, timeout);
      poll.marks().committed(durable);
    }
  }

  @Override
  public void commitAsync() {
    if (passesStraightThrough()) {
      delegate.commitAsync();
      return;
    }
    commitAsync(positions(), null);
  }

  @Override
  public void commitAsync(@Nullable OffsetCommitCallback callback) {
    if (passesStraightThrough()) {
      delegate.commitAsync(remembered(callback));
      return;
    }
    commitAsync(positions(), callback);
  }

  @Override
  public void commitAsync(
      Map<TopicPartition, OffsetAndMetadata> offsets, @Nullable OffsetCommitCallback callback) {
    HeldCommit commit =
        HeldCommit.async(offsets, callback, told -> () -> commitAsync(offsets, told));
    if (heldForBatch(commit) || afterTransaction(commit)) {
      return;
    }
    // Cut at the marks not written yet; waited for only while partitions are being revoked.
    Map<TopicPartition, OffsetAndMetadata> durable = durable(offsets);
    if (!durable.isEmpty()) {
      // Counted as sent before it is: a consumer may answer it at once, before this returns.
      poll.marks().committed(durable);
      try {
        delegate.commitAsync(durable, owedAgainIfItFails(durable, callback));
      } catch (RuntimeException | Error e) {
        // Not sent: Kafka runs the callbacks of the commits that completed before it sends one,
        // and throws what an application's callback threw (an Error too) instead.
        poll.marks().notCommitted(durable);
        throw e;
      }
    } else if (callback != null) {
      callback.onComplete(durable, null);
    }
  }

  /**
   * {@code callback}, after what {@code sent} passed is owed again if the commit failed:
   * spring-kafka only logs a failed asynchronous commit, and commits a partition again only with
   * its next records, so what an idle partition was owed (carried by another partition's commit)
   * would wait for a rebalance or a restart, and its records come again. Owed again, it is
   * committed before a later poll once the consumer is idle, or with the next commit of any
   * partition.
   */
  private OffsetCommitCallback owedAgainIfItFails(
      Map<TopicPartition, OffsetAndMetadata> sent, @Nullable OffsetCommitCallback callback) {
    OffsetCommitCallback application = remembered(callback);
    return (offsets, exception) -> {
      if (exception != null) {
        poll.marks().notCommitted(sent);
      }
      if (application != null) {
        application.onComplete(offsets, exception);
      }
    };
  }

  /**
   * {@code callback}, what it throws kept as {@link #callbackThrew}: that of every commit given to
   * the delegate, those that pass straight through included, since Kafka throws it from whichever
   * commit it sends next, a held one too.
   */
  private @Nullable OffsetCommitCallback remembered(@Nullable OffsetCommitCallback callback) {
    if (callback == null) {
      return null;
    }
    return (offsets, exception) -> {
      try {
        callback.onComplete(offsets, exception);
      } catch (RuntimeException | Error e) {
        callbackThrew = e;
        throw e;
      }
    };
  }

  /** Whether a commit goes to the delegate as it is: no marks to cut at, no transaction to wait. */
  private boolean passesStraightThrough() {
    return poll.marks().isEmpty()
        && heldForBatch == null
        && (committingAfterTransaction
            || !TransactionSynchronizationManager.isSynchronizationActive());
  }

  /**
   * Holds the commits made through this consumer from now on, until {@link CommitHold#release}: an
   * {@code @Idempotent} listener runs (a batch listener, or a record listener), and its outcomes
   * are written after it returns. A commit it makes through its {@code Consumer} argument ({@code
   * commitSync()}, which commits the positions, past the whole batch) would pass records whose
   * SUCCESS is not written yet, and, if the listener then throws, records left FAILED: with the
   * container stopped, or the partition gone, before their retry, they would never come again.
   *
   * @return the hold, to be released once the call's outcome is settled
   */
  public CommitHold holdCommits() {
    CommitHold hold = new CommitHold(this, heldForBatch);
    heldForBatch = hold;
    return hold;
  }

  /** See {@link CommitHold#release}. */
  private void releaseCommits(CommitHold hold, boolean send) {
    if (hold.ended) {
      return;
    }
    hold.ended = true;
    CommitHold enclosing = hold.enclosing;
    while (enclosing != null && enclosing.ended) {
      enclosing = enclosing.enclosing;
    }
    if (heldForBatch == hold) {
      heldForBatch = enclosing;
    }
    List<HeldCommit> held = hold.commits;
    if (held.isEmpty()) {
      return;
    }
    if (send && enclosing != null) {
      // Made within the enclosing call, past its record too: its outcome decides, as for the
      // commits it made itself.
      enclosing.commits.addAll(held);
      return;
    }
    // An Error an application's commit callback throws is thrown once every held commit was sent
    // or its callback told: thrown at once, it left the commits behind it neither sent nor told,
    // and whatever waits on their callbacks waiting for good.
    if (!send) {
      log.debug("Dropping {} offset commits of a listener whose call failed", held.size());
      EachRegardless.run(this, held, 0, held.size(), DROP_HELD);
    } else {
      EachRegardless.run(this, held, 0, held.size(), SEND_HELD);
    }
  }

  /**
   * Sends a commit held for a batch call that succeeded.
   *
   * @throws Error an {@code Error} an application's commit callback threw
   */
  private void releaseHeld(HeldCommit commit) {
    // A record listener may run in a transaction of this thread (the container's): its commits
    // then wait for that transaction's commit, as they would have without the hold.
    try {
      if (!afterTransaction(commit)) {
        commitHeld(commit, "the listener's outcomes were written");
      }
    } catch (RuntimeException e) {
      // An application's callback of an earlier commit, which Kafka runs as it sends this one
      // (the commit's own failures are logged by commitHeld). Its listener returned long since
      // and cannot catch it; thrown now, it failed records whose outcomes are written: the
      // error handler retried them as duplicates, or gave them up to its recoverer (a dead
      // letter of a record applied).
      log.warn(
          "An offset commit callback threw as the offsets held until the listener's outcomes"
              + " were written were sent; the listener's call stands: {}",
          FailureTexts.describe(e),
          FailureTexts.loggable(e));
    }
  }

  /**
   * The {@code Consumer} among a listener method's {@code arguments}, as one whose commits can be
   * held ({@link #holdCommits}); null if the method takes none. The container's own consumer is not
   * a consumer-dedup one when its consumers are left as they are ({@code
   * consumer-dedup.claims-per-poll=false}, a consumer factory other than a {@code
   * DefaultKafkaConsumerFactory}): the method is then given it wrapped in {@code arguments}, for
   * this call only, so that its commits are held all the same.
   */
  public static @Nullable PollAwareConsumer<?, ?> holdingCommitsAmong(
      @Nullable Object[] arguments) {
    for (int i = 0; i < arguments.length; i++) {
      if (arguments[i] instanceof PollAwareConsumer<?, ?> consumer) {
        return consumer;
      }
      if (arguments[i] instanceof Consumer<?, ?> consumer) {
        PollAwareConsumer<?, ?> holding = new PollAwareConsumer<>(consumer);
        arguments[i] = holding;
        return holding;
      }
    }
    return null;
  }

  /** Whether {@code commit} is held until the running batch listener's outcomes are written. */
  private boolean heldForBatch(HeldCommit commit) {
    CommitHold hold = heldForBatch;
    if (hold == null || committingAfterTransaction) {
      return false;
    }
    hold.commits.add(commit);
    return true;
  }

  /**
   * The commits held for one {@code @Idempotent} call ({@link #holdCommits}). Calls nest: a
   * listener calls an {@code @Idempotent} method of another bean whose message carries the same
   * consumer. The inner call's hold ends before the enclosing one, which then holds again: replaced
   * by the inner hold, the enclosing call's commits made before it were neither sent nor their
   * callbacks told, and those made after it went out at once, before its outcome was written.
   */
  public static final class CommitHold {
    private final PollAwareConsumer<?, ?> consumer;
    private final @Nullable CommitHold enclosing;
    private final List<HeldCommit> commits = new ArrayList<>();
    private boolean ended;

    private CommitHold(PollAwareConsumer<?, ?> consumer, @Nullable CommitHold enclosing) {
      this.consumer = consumer;
      this.enclosing = enclosing;
    }

    /**
     * Ends the hold: sends the commits held, in their order, if {@code send} (every record of the
     * call is done, its outcome written or, in a transaction, left to its commit), else drops them
     * (the container's error handler commits the records before a failed one). Sent within an
     * enclosing call still holding, they join its hold instead. Once the hold is ended, nothing.
     *
     * @throws Error an {@code Error} an application's commit callback threw, once every held commit
     *     was sent or its callback told; a {@code RuntimeException} one threw is logged instead
     */
    public void release(boolean send) {
      consumer.releaseCommits(this, send);
    }
  }

  /**
   * Runs {@code commit} once the transaction of this thread has committed, if there is one, and
   * drops it if the transaction rolls back. A container with a database transaction manager runs
   * each record's listener in a transaction, and spring-kafka commits the record's offset inside it
   * (ack mode {@code RECORD}, an {@code acknowledge()} under {@code MANUAL_IMMEDIATE}), before the
   * database commit: a crash between the two, or a commit that fails, would leave the offset past a
   * record whose effects and dedup row were never committed, and the record lost. Rolled back, the
   * record is delivered again, and its offset goes with a later commit.
   *
   * <p>Sent from {@code afterCompletion}, which runs after every {@code afterCommit}: the record's
   * SUCCESS mark is added in an {@code afterCommit} registered after this one (a listener that
   * acknowledges under {@code MANUAL_IMMEDIATE} commits before it returns), and a commit sent
   * before it would not be cut at that mark.
   *
   * @return whether {@code commit} was left to the transaction
   */
  private boolean afterTransaction(HeldCommit commit) {
    if (committingAfterTransaction
        || !TransactionSynchronizationManager.isSynchronizationActive()) {
      return false;
    }
    TransactionSynchronizationManager.registerSynchronization(
        new TransactionSynchronization() {
          @Override
          public void afterCompletion(int status) {
            if (status == STATUS_COMMITTED) {
              commitHeld(commit, "the listener's transaction committed");
            } else {
              Error thrown = commit.dropped("the listener's transaction did not commit");
              if (thrown != null) {
                throw thrown; // Spring logs it; the other synchronizations run all the same
              }
            }
          }
        });
    return true;
  }

  /** Sends a commit held until {@code after}, as a commit outside any transaction or hold. */
  private void commitHeld(HeldCommit commit, String after) {
    // Not to be left to a transaction again: synchronization may still be active while it runs.
    committingAfterTransaction = true;
    try {
      sendHeld(commit);
    } catch (WakeupException e) {
      // A stop's wakeup, spent here where the container cannot see it: commit, and wake the next
      // poll in its place so the stop still ends it.
      try {
        sendHeld(commit);
      } catch (KafkaException | IllegalStateException again) {
        log.warn("Could not commit offsets held until {}", after, again);
      } finally {
        delegate.wakeup();
      }
    } catch (KafkaException | IllegalStateException e) {
      if (e == callbackThrew) {
        throw e; // an application's callback: the commit was sent all the same
      }
      // Thrown here, it would reach the container as a failure of records that are done. A later
      // commit of their partitions passes them.
      log.warn("Could not commit offsets held until {}", after, e);
    } finally {
      committingAfterTransaction = false;
    }
  }

  /**
   * Sends {@code commit}. Kafka runs the callbacks of the asynchronous commits that completed
   * before it sends one, and throws what such a callback of the application's throws instead of
   * sending it: the commit, whose caller has returned long since, is sent once more, and what was
   * thrown is thrown afterwards. A commit whose own callback was told already was sent: not again.
   */
  private void sendHeld(HeldCommit commit) {
    try {
      commit.send.run();
    } catch (RuntimeException | Error thrown) {
      if (thrown != callbackThrew
          && (thrown instanceof KafkaException || thrown instanceof IllegalStateException)) {
        throw thrown; // the commit's own failure
      }
      if (commit.told) {
        throw thrown;
      }
      try {
        commit.send.run();
      } catch (RuntimeException | Error again) {
        thrown.addSuppressed(again);
        Error dropped = commit.dropped("sending it threw " + FailureTexts.describe(thrown));
        if (dropped != null && dropped != thrown) {
          thrown.addSuppressed(dropped);
        }
      }
      throw thrown;
    }
  }

  /**
   * A commit held until a listener's outcomes are written ({@link #holdCommits}) or its transaction
   * has committed ({@link #afterTransaction}): {@code send} sends it. An asynchronous commit's
   * callback is told when it is dropped instead: Kafka tells a callback how every commit ended, and
   * one never told leaves what waits on it (a future completed there, a count of commits in flight)
   * waiting for good.
   */
  private static final class HeldCommit {
    final Runnable send;
    private final @Nullable Map<TopicPartition, OffsetAndMetadata> offsets;
    private final @Nullable OffsetCommitCallback callback;

    /** Whether the callback was told how the commit ended (told before it runs: it may throw). */
    volatile boolean told;

    private HeldCommit(
        @Nullable Function<@Nullable OffsetCommitCallback, Runnable> sendTelling,
        @Nullable Runnable send,
        @Nullable Map<TopicPartition, OffsetAndMetadata> offsets,
        @Nullable OffsetCommitCallback callback) {
      this.offsets = offsets;
      this.callback = callback;
      OffsetCommitCallback telling =
          callback == null
              ? null
              : (committed, e) -> {
                told = true;
                callback.onComplete(committed, e);
              };
      this.send = send != null ? send : Objects.requireNonNull(sendTelling).apply(telling);
    }

    /** A synchronous commit, whose caller was answered already: nothing to tell if dropped. */
    static HeldCommit sync(Runnable send) {
      return new HeldCommit(null, send, null, null);
    }

    /** An asynchronous commit of {@code offsets}: {@code send} sends it with the callback given. */
    static HeldCommit async(
        Map<TopicPartition, OffsetAndMetadata> offsets,
        @Nullable OffsetCommitCallback callback,
        Function<@Nullable OffsetCommitCallback, Runnable> send) {
      return new HeldCommit(send, null, offsets, callback);
    }

    /**
     * Tells the callback, if any and not told yet, that the commit is not sent, because of {@code
     * why}.
     *
     * @return an Error the callback threw, for the caller to throw once the others are told
     */
    @Nullable Error dropped(String why) {
      if (callback == null || offsets == null || told) {
        return null;
      }
      told = true;
      try {
        callback.onComplete(
            offsets,
            new CommitFailedException(
                "Offsets not committed: the commit was held until the @Idempotent listener's"
                    + " outcome was settled, and dropped because "
                    + why
                    + " (the record is delivered again, or the container's error handler commits"
                    + " the records before it)"));
      } catch (RuntimeException e) {
        // The listener's failure or the transaction's end is what the container must hear.
        log.warn(
            "The callback of an offset commit that was dropped threw", FailureTexts.loggable(e));
      } catch (Error e) {
        return e;
      }
      return null;
    }
  }

  /**
   * The container handed {@code record} to its listener inside a transaction of this thread (the
   * record interceptor's {@code success} or {@code failure} runs in it): if that transaction does
   * not commit, no offset commit passes the record until it is passed ({@link
   * SuccessMarks#rolledBack}). Outside a transaction, nothing.
   */
  public void handedOverInTransaction(ConsumerRecord<?, ?> record) {
    if (!TransactionSynchronizationManager.isSynchronizationActive()) {
      return;
    }
    TransactionSynchronizationManager.registerSynchronization(
        new TransactionSynchronization() {
          @Override
          public int getOrder() {
            // Before the commit left to the transaction ({@link #afterTransaction}), which the
            // hold this ends would cut.
            return Ordered.HIGHEST_PRECEDENCE;
          }

          @Override
          public void afterCommit() {
            poll.marks().transactionCommitted(record);
          }

          @Override
          public void afterCompletion(int status) {
            // A commit that fails is reported as of unknown outcome, not as rolled back.
            if (status != STATUS_COMMITTED) {
              poll.marks().rolledBack(record);
            }
          }
        });
  }

  private @Nullable Long positionIfAssigned(TopicPartition partition) {
    if (!delegate.assignment().contains(partition)) {
      return null;
    }
    try {
      return delegate.position(partition, OWED_WAIT);
    } catch (WakeupException | InterruptException e) {
      throw e; // the container's stop, for the poll
    } catch (KafkaException | IllegalStateException e) {
      // Judged again at the next poll.
      return Long.MIN_VALUE;
    }
  }

  /** What a commit without offsets commits: each assigned partition's position. */
  private Map<TopicPartition, OffsetAndMetadata> positions() {
    Map<TopicPartition, OffsetAndMetadata> positions = new HashMap<>();
    for (TopicPartition partition : delegate.assignment()) {
      positions.put(partition, new OffsetAndMetadata(delegate.position(partition)));
    }
    return positions;
  }

  /**
   * {@code offsets}, each partition cut before its first record whose SUCCESS is not written; with
   * what earlier commits of other partitions could not pass and now may.
   */
  private Map<TopicPartition, OffsetAndMetadata> durable(
      Map<TopicPartition, OffsetAndMetadata> offsets) {
    if (poll.marks().isEmpty()) {
      return offsets;
    }
    // Marks on their way are not waited for, except for partitions that go: the next poll's
    // listeners wait for them, after claiming that poll's keys.
    Map<TopicPartition, OffsetAndMetadata> durable =
        new HashMap<>(poll.marks().durable(offsets, revoking));
    // A partition whose records stopped coming gets no commit of the container's own: what it is
    // owed goes with the commits of the partitions that keep the consumer busy, which may never
    // let it poll empty.
    Map<TopicPartition, OffsetAndMetadata> owed = poll.marks().owedNow(false);
    owed.keySet().removeAll(offsets.keySet());
    if (!owed.isEmpty()) {
      owed.keySet().retainAll(delegate.assignment());
      durable.putAll(owed);
    }
    return durable;
  }

  @Override
  public void subscribe(Collection<String> topics) {
    delegate.subscribe(topics, guarded(null));
  }

  @Override
  public void subscribe(Collection<String> topics, ConsumerRebalanceListener callback) {
    delegate.subscribe(topics, guarded(callback));
  }

  @Override
  public void subscribe(Pattern pattern, ConsumerRebalanceListener callback) {
    delegate.subscribe(pattern, guarded(callback));
  }

  @Override
  public void subscribe(Pattern pattern) {
    delegate.subscribe(pattern, guarded(null));
  }

  @Override
  public void subscribe(SubscriptionPattern pattern, ConsumerRebalanceListener callback) {
    delegate.subscribe(pattern, guarded(callback));
  }

  @Override
  public void subscribe(SubscriptionPattern pattern) {
    delegate.subscribe(pattern, guarded(null));
  }

  /**
   * {@code callback} (the container's, which commits what is done), then the claims and marks of
   * the partitions that go are let go.
   */
  private ConsumerRebalanceListener guarded(@Nullable ConsumerRebalanceListener callback) {
    return new ConsumerRebalanceListener() {
      @Override
      public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
        revoking = true;
        try {
          try {
            if (callback != null) {
              callback.onPartitionsRevoked(partitions);
            }
          } catch (RuntimeException | Error e) {
            // The container's listener runs the application's onPartitionsRevokedBeforeCommit
            // first, and what that throws skips the container's commit and is thrown from the
            // poll. The partitions go all the same: what is owed of them is committed first, or
            // their next owner reads those records again.
            try {
              commitOwed(true, partitions);
            } catch (RuntimeException again) {
              e.addSuppressed(again);
            }
            throw e;
          }
          commitOwed(true, partitions);
        } finally {
          revoking = false;
          poll.revoked(partitions);
        }
      }

      @Override
      public void onPartitionsLost(Collection<TopicPartition> partitions) {
        try {
          if (callback != null) {
            callback.onPartitionsLost(partitions);
          }
        } finally {
          poll.revoked(partitions);
        }
      }

      @Override
      public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
        if (callback != null) {
          callback.onPartitionsAssigned(partitions);
        }
      }
    };
  }

  /**
   * A consumer whose partitions were assigned by hand has no rebalance to commit what it owes when
   * they go, and spring-kafka unsubscribes it before closing it when its container stops: what it
   * owes is committed first, once its marks are written (waiting, as a close does), else the close
   * finds no partition left and the records come again at the next start. A group subscription's
   * revocation does this from its rebalance listener.
   */
  @Override
  public void unsubscribe() {
    if (delegate.subscription().isEmpty()) {
      Set<TopicPartition> assigned = delegate.assignment();
      try {
        commitOwedBeforeLettingGo(assigned);
      } finally {
        poll.revoked(assigned);
      }
    }
    delegate.unsubscribe();
  }

  @Override
  public void close() {
    try {
      closing();
    } finally {
      delegate.close();
    }
  }

  @Override
  @SuppressWarnings("deprecation")
  public void close(Duration timeout) {
    try {
      closing();
    } finally {
      delegate.close(timeout);
    }
  }

  @Override
  public void close(CloseOptions option) {
    try {
      closing();
    } finally {
      delegate.close(option);
    }
  }

  /** Commits what is owed once its marks are written (waiting), and gives back unused claims. */
  private void closing() {
    try {
      commitOwedBeforeLettingGo(delegate.assignment());
    } finally {
      poll.ended();
    }
  }

  /** Commits what is owed of {@code partitions}, which go, once their marks are written. */
  private void commitOwedBeforeLettingGo(Collection<TopicPartition> partitions) {
    try {
      commitOwed(true, partitions);
    } catch (WakeupException e) {
      // A stop's wakeup that no poll took: spent now, and the partitions go anyway, so the owed
      // offsets are committed rather than their records delivered again.
      try {
        commitOwed(true, partitions);
      } catch (WakeupException | InterruptException again) {
        log.debug("Could not commit the offsets owed as partitions go", again);
      }
    } catch (InterruptException e) {
      log.debug("Interrupted while committing the offsets owed as partitions go", e);
    }
  }

  @Override
  public String toString() {
    return "PollAwareConsumer{" + delegate + "}";
  }
}
