package io.consumerdedup.spring.internal;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.DedupKey;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetCommitCallback;
import org.apache.kafka.clients.consumer.RetriableCommitFailedException;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

/**
 * A container with {@code syncCommits=false}: its commit of a busy partition carries what an idle
 * partition is owed (a commit cut at SUCCESS marks on their way, written since), and that
 * asynchronous commit fails (the coordinator moved, a request timed out). spring-kafka only logs a
 * failed asynchronous commit, and commits nothing more of the idle partition, whose records stopped
 * coming: what it was owed is owed again, and committed once the consumer is idle, rather than its
 * records coming again after the next rebalance or restart.
 */
class PollAwareConsumerAsyncCommitFailureTest {
  private static final TopicPartition BUSY = new TopicPartition("payments", 0);
  private static final TopicPartition IDLE = new TopicPartition("payments", 1);

  /** A consumer whose next asynchronous commit fails, answered in a later poll as Kafka's are. */
  private static final class FailingAsyncCommits extends MockConsumer<String, String> {
    private boolean failNext;
    private final List<Runnable> answers = new ArrayList<>();

    FailingAsyncCommits() {
      super("earliest");
    }

    synchronized void failNextAsyncCommit() {
      failNext = true;
    }

    @Override
    public synchronized void commitAsync(
        Map<TopicPartition, OffsetAndMetadata> offsets, OffsetCommitCallback callback) {
      if (callback != null && failNext) {
        failNext = false;
        answers.add(
            () ->
                callback.onComplete(
                    offsets, new RetriableCommitFailedException("injected: the commit failed")));
        return;
      }
      super.commitAsync(offsets, callback);
    }

    @Override
    public synchronized ConsumerRecords<String, String> poll(Duration timeout) {
      List<Runnable> due = new ArrayList<>(answers);
      answers.clear();
      due.forEach(Runnable::run);
      return super.poll(timeout);
    }
  }

  @Test
  void whatAnIdlePartitionIsOwedIsCommittedThoughTheAsyncCommitCarryingItFailed() {
    FailingAsyncCommits kafka = new FailingAsyncCommits();
    PollAwareConsumer<String, String> consumer = new PollAwareConsumer<>(kafka);
    consumer.subscribe(List.of("payments"));
    kafka.rebalance(List.of(BUSY, IDLE));
    kafka.updateBeginningOffsets(Map.of(BUSY, 0L, IDLE, 0L));
    // The idle partition's last three records are done, their marks on their way as the container
    // commits past them: the commit is cut at the first, the rest owed.
    CompletableFuture<Void> written = new CompletableFuture<>();
    for (long offset = 0; offset < 3; offset++) {
      consumer
          .poll()
          .marks()
          .add(
              new ConsumerRecord<>(IDLE.topic(), IDLE.partition(), offset, null, "v"),
              DedupKey.of("payment", "P-" + offset),
              "payments-1@" + offset,
              written,
              Duration.ofMillis(100),
              () -> true);
    }
    consumer.commitSync(Map.of(IDLE, new OffsetAndMetadata(3)));
    assertThat(committedOffset(kafka, IDLE)).as("[cut at the first mark on its way]").isZero();
    written.complete(null);

    // The container commits the busy partition asynchronously; the idle one's owed offset goes
    // with it, and that commit fails.
    kafka.failNextAsyncCommit();
    AtomicReference<Exception> containerSaw = new AtomicReference<>();
    consumer.commitAsync(
        Map.of(BUSY, new OffsetAndMetadata(5)), (offsets, e) -> containerSaw.set(e));
    consumer.poll(Duration.ofMillis(10)); // answers the commit; no record comes
    assertThat(containerSaw.get())
        .as("[the failure the container's callback is told of]")
        .isInstanceOf(RetriableCommitFailedException.class);
    consumer.poll(Duration.ofMillis(10)); // the consumer is idle: what is owed is committed

    assertThat(committedOffset(kafka, IDLE))
        .as("[committed offset of the idle partition, its records done and their marks written]")
        .isEqualTo(3L);
    assertThat(committedOffset(kafka, BUSY))
        .as("[committed offset of the busy partition, whose commit failed]")
        .isEqualTo(5L);
  }

  private static long committedOffset(
      MockConsumer<String, String> kafka, TopicPartition partition) {
    OffsetAndMetadata committed = kafka.committed(Set.of(partition)).get(partition);
    return committed == null ? -1 : committed.offset();
  }
}
