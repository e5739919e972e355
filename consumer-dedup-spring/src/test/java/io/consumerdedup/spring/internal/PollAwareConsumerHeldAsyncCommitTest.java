package io.consumerdedup.spring.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.List;
import java.util.Map;
import java.util.Queue;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetCommitCallback;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * An {@code @Idempotent} listener commits asynchronously through its {@code Consumer} argument,
 * with a callback, and its call then fails: the commit, held until the call's outcome was settled,
 * is dropped; so is one made inside the listener's database transaction, which then rolls back.
 * Kafka tells a callback how every commit ended; one never told leaves whatever waits on it (a
 * future the application completes there, a count of commits in flight) waiting for good. A
 * callback that throws an {@code Error} does not keep the held commits behind it from being sent,
 * or their callbacks from being told.
 */
class PollAwareConsumerHeldAsyncCommitTest {
  private static final TopicPartition PARTITION = new TopicPartition("payments", 0);

  @Test
  void aHeldAsyncCommitDroppedAsTheListenerFailedTellsItsCallbackItWasNotCommitted() {
    MockConsumer<String, String> kafka = new MockConsumer<>("earliest");
    PollAwareConsumer<String, String> consumer = assigned(kafka);

    PollAwareConsumer.CommitHold hold = consumer.holdCommits(); // the listener's call begins
    CompletableFuture<Map<TopicPartition, OffsetAndMetadata>> commitEnded =
        new CompletableFuture<>();
    consumer.commitAsync(Map.of(PARTITION, new OffsetAndMetadata(1)), toldTo(commitEnded));
    hold.release(false); // the call threw: its commits are dropped

    assertThat(kafka.committed(Set.of(PARTITION)).get(PARTITION))
        .as("[offset committed past the record whose call failed]")
        .isNull();
    assertThat(commitEnded)
        .as("[the listener's commit callback, its commit dropped as the call failed]")
        .isCompletedExceptionally();
  }

  /**
   * A listener calls an {@code @Idempotent} method of another bean whose message carries the same
   * consumer: the listener's commits made before and after that call, and the method's own, wait
   * for the listener's outcome, and are dropped, their callbacks told, when it fails.
   */
  @Test
  void commitsAroundANestedCallWaitForTheEnclosingCallAndAreDroppedWhenItFails() {
    MockConsumer<String, String> kafka = new MockConsumer<>("earliest");
    PollAwareConsumer<String, String> consumer = assigned(kafka);
    List<CompletableFuture<Map<TopicPartition, OffsetAndMetadata>>> ended =
        List.of(new CompletableFuture<>(), new CompletableFuture<>(), new CompletableFuture<>());

    PollAwareConsumer.CommitHold listener = consumer.holdCommits();
    consumer.commitAsync(Map.of(PARTITION, new OffsetAndMetadata(1)), toldTo(ended.get(0)));
    PollAwareConsumer.CommitHold method = consumer.holdCommits();
    consumer.commitAsync(Map.of(PARTITION, new OffsetAndMetadata(1)), toldTo(ended.get(1)));
    method.release(true); // the method's call succeeded
    consumer.commitAsync(Map.of(PARTITION, new OffsetAndMetadata(1)), toldTo(ended.get(2)));

    assertThat(kafka.committed(Set.of(PARTITION)).get(PARTITION))
        .as("[offset committed while the listener's call runs]")
        .isNull();
    listener.release(false); // the listener's call threw
    assertThat(kafka.committed(Set.of(PARTITION)).get(PARTITION))
        .as("[offset committed past the record whose listener failed]")
        .isNull();
    assertThat(ended)
        .as("[the callbacks of the commits before, within and after the method's call]")
        .allSatisfy(callback -> assertThat(callback).isCompletedExceptionally());
  }

  @Test
  void anAsyncCommitLeftToATransactionThatRollsBackTellsItsCallbackItWasNotCommitted() {
    MockConsumer<String, String> kafka = new MockConsumer<>("earliest");
    PollAwareConsumer<String, String> consumer = assigned(kafka);

    CompletableFuture<Map<TopicPartition, OffsetAndMetadata>> commitEnded =
        new CompletableFuture<>();
    TransactionSynchronizationManager.initSynchronization(); // the listener's transaction
    try {
      consumer.commitAsync(Map.of(PARTITION, new OffsetAndMetadata(1)), toldTo(commitEnded));
      for (TransactionSynchronization synchronization :
          TransactionSynchronizationManager.getSynchronizations()) {
        synchronization.afterCompletion(TransactionSynchronization.STATUS_ROLLED_BACK);
      }
    } finally {
      TransactionSynchronizationManager.clearSynchronization();
    }

    assertThat(kafka.committed(Set.of(PARTITION)).get(PARTITION))
        .as("[offset committed past the record whose transaction rolled back]")
        .isNull();
    assertThat(commitEnded)
        .as("[the listener's commit callback, its commit dropped as its transaction rolled back]")
        .isCompletedExceptionally();
  }

  @Test
  void anErrorThrownByOneDroppedCommitsCallbackStillTellsTheCallbacksBehindIt() {
    MockConsumer<String, String> kafka = new MockConsumer<>("earliest");
    PollAwareConsumer<String, String> consumer = assigned(kafka);
    Error callbackError = new StackOverflowError("the application's first commit callback");

    PollAwareConsumer.CommitHold hold = consumer.holdCommits(); // the listener's call begins
    CompletableFuture<Map<TopicPartition, OffsetAndMetadata>> secondEnded =
        heldBehind(
            consumer,
            (offsets, e) -> {
              throw callbackError;
            });

    assertThatThrownBy(() -> hold.release(false)) // the call threw
        .as("[what the first callback threw, once every callback was told]")
        .isSameAs(callbackError);
    assertThat(secondEnded)
        .as("[the second commit's callback, its commit dropped as the call failed]")
        .isCompletedExceptionally();
  }

  /**
   * Kafka's consumer runs the callbacks of the asynchronous commits that completed before it sends
   * a commit, and what one throws is thrown instead of sending it. Released, the listener's second
   * held commit meets the Error of the first one's callback.
   */
  @Test
  void anErrorThrownByOneSentCommitsCallbackStillSendsTheHeldCommitBehindIt() {
    CallbacksLater kafka = new CallbacksLater();
    PollAwareConsumer<String, String> consumer = assigned(kafka);
    Error callbackError = new StackOverflowError("the application's first commit callback");

    PollAwareConsumer.CommitHold hold = consumer.holdCommits(); // the listener's call begins
    CompletableFuture<Map<TopicPartition, OffsetAndMetadata>> secondEnded =
        heldBehind(
            consumer,
            (offsets, e) -> {
              throw callbackError;
            });

    assertThatThrownBy(() -> hold.release(true)) // the call succeeded
        .as("[what the first callback threw, once the held commits were sent]")
        .isSameAs(callbackError);
    assertSecondSentAndTold(kafka, consumer, secondEnded);
  }

  /**
   * As above, with the {@code IllegalStateException} a callback of the application's throws (one
   * whose future was completed already, say): Kafka throws it as it would a failure of the commit
   * being sent, which it did not send.
   */
  @Test
  void anIllegalStateExceptionThrownByOneSentCommitsCallbackStillSendsTheHeldCommitBehindIt() {
    CallbacksLater kafka = new CallbacksLater();
    PollAwareConsumer<String, String> consumer = assigned(kafka);

    PollAwareConsumer.CommitHold hold = consumer.holdCommits(); // the listener's call begins
    CompletableFuture<Map<TopicPartition, OffsetAndMetadata>> secondEnded =
        heldBehind(
            consumer,
            (offsets, e) -> {
              throw new IllegalStateException("the application's first commit callback");
            });
    hold.release(true); // the call succeeded

    assertSecondSentAndTold(kafka, consumer, secondEnded);
  }

  /**
   * As above, the callback being that of a commit the application made through the consumer outside
   * a listener's call, which went to Kafka as it was (a rebalance listener's or an idle event
   * listener's {@code commitAsync(callback)}): its exception too is the application's, not the held
   * commit's own failure.
   */
  @Test
  void anIllegalStateExceptionOfACallbackOfACommitOutsideTheCallStillSendsTheHeldCommitBehindIt() {
    CallbacksLater kafka = new CallbacksLater();
    PollAwareConsumer<String, String> consumer = assigned(kafka);
    consumer.poll(Duration.ZERO);

    consumer.commitAsync(
        (offsets, e) -> {
          throw new IllegalStateException("the application's callback of a commit outside a call");
        });
    PollAwareConsumer.CommitHold hold = consumer.holdCommits(); // the listener's call begins
    CompletableFuture<Map<TopicPartition, OffsetAndMetadata>> heldEnded = new CompletableFuture<>();
    consumer.commitAsync(Map.of(PARTITION, new OffsetAndMetadata(2)), toldTo(heldEnded));
    hold.release(true); // the call succeeded

    assertSentAndTold(
        kafka,
        consumer,
        "[committed offset, the listener's commit held behind one made outside its call]",
        heldEnded,
        "[the held commit's callback]");
  }

  /**
   * A callback of the application's throws, as its dropped commit is told, an exception whose
   * {@code getMessage()} throws (one printing a field of a closed connection): logging it must not
   * throw in place of the listener's failure, or leave the callbacks behind it untold.
   */
  @Test
  void anUnprintableExceptionOfADroppedCommitsCallbackStillTellsTheCallbacksBehindIt() {
    MockConsumer<String, String> kafka = new MockConsumer<>("earliest");
    PollAwareConsumer<String, String> consumer = assigned(kafka);

    PollAwareConsumer.CommitHold hold = consumer.holdCommits(); // the listener's call begins
    CompletableFuture<Map<TopicPartition, OffsetAndMetadata>> secondEnded =
        heldBehind(
            consumer,
            (offsets, e) -> {
              throw new IllegalArgumentException() {
                @Override
                public String getMessage() {
                  throw new IllegalStateException("connection closed");
                }
              };
            });

    hold.release(false); // the call threw: its commits are dropped
    assertThat(secondEnded)
        .as("[the second commit's callback, its commit dropped as the call failed]")
        .isCompletedExceptionally();
  }

  /** Assigned partition 0 of "payments", read from its beginning. */
  private static PollAwareConsumer<String, String> assigned(MockConsumer<String, String> kafka) {
    PollAwareConsumer<String, String> consumer = new PollAwareConsumer<>(kafka);
    consumer.subscribe(List.of("payments"));
    kafka.rebalance(List.of(PARTITION));
    kafka.updateBeginningOffsets(Map.of(PARTITION, 0L));
    return consumer;
  }

  /**
   * A listener's call, holding its commits, commits offset 1 with {@code firstCallback}, then
   * offset 2.
   *
   * @return ended as the second commit's callback is told
   */
  private static CompletableFuture<Map<TopicPartition, OffsetAndMetadata>> heldBehind(
      PollAwareConsumer<String, String> consumer, OffsetCommitCallback firstCallback) {
    consumer.commitAsync(Map.of(PARTITION, new OffsetAndMetadata(1)), firstCallback);
    CompletableFuture<Map<TopicPartition, OffsetAndMetadata>> secondEnded =
        new CompletableFuture<>();
    consumer.commitAsync(Map.of(PARTITION, new OffsetAndMetadata(2)), toldTo(secondEnded));
    return secondEnded;
  }

  /** As below, for the second of the commits {@link #heldBehind} made. */
  private static void assertSecondSentAndTold(
      MockConsumer<String, String> kafka,
      PollAwareConsumer<String, String> consumer,
      CompletableFuture<Map<TopicPartition, OffsetAndMetadata>> secondEnded) {
    assertSentAndTold(
        kafka,
        consumer,
        "[committed offset, the listener's second commit held behind the first]",
        secondEnded,
        "[the second commit's callback]");
  }

  /** Offset 2 was committed, and its callback told so at the next poll (where Kafka tells it). */
  private static void assertSentAndTold(
      MockConsumer<String, String> kafka,
      PollAwareConsumer<String, String> consumer,
      String committed,
      CompletableFuture<Map<TopicPartition, OffsetAndMetadata>> ended,
      String callback) {
    assertThat(kafka.committed(Set.of(PARTITION)).get(PARTITION))
        .as(committed)
        .isEqualTo(new OffsetAndMetadata(2));
    consumer.poll(Duration.ZERO);
    assertThat(ended)
        .as(callback)
        .isCompletedWithValue(Map.of(PARTITION, new OffsetAndMetadata(2)));
  }

  private static OffsetCommitCallback toldTo(
      CompletableFuture<Map<TopicPartition, OffsetAndMetadata>> ended) {
    return (offsets, e) -> {
      if (e != null) {
        ended.completeExceptionally(e);
      } else {
        ended.complete(offsets);
      }
    };
  }

  /**
   * A consumer that tells a commit's callback as Kafka's does: at the next commit or poll, before
   * anything else, one after the other (what one throws is thrown there, the rest wait).
   */
  private static final class CallbacksLater extends MockConsumer<String, String> {
    private final Queue<Runnable> completed = new ArrayDeque<>();

    CallbacksLater() {
      super("earliest");
    }

    @Override
    public synchronized void commitAsync(
        Map<TopicPartition, OffsetAndMetadata> offsets, OffsetCommitCallback callback) {
      tellCompleted();
      super.commitAsync(
          offsets,
          callback == null ? null : (done, e) -> completed.add(() -> callback.onComplete(done, e)));
    }

    @Override
    public synchronized ConsumerRecords<String, String> poll(Duration timeout) {
      tellCompleted();
      return super.poll(timeout);
    }

    private void tellCompleted() {
      for (Runnable callback = completed.poll(); callback != null; callback = completed.poll()) {
        callback.run();
      }
    }
  }
}
