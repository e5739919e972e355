package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.KEY_HEADER;
import static io.consumerdedup.kafka.LoopFixture.WAIT;
import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** How {@link DedupPollLoop} ends when its close or its last commit is disturbed. */
class DedupPollLoopStopTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_stop");

  private final ExecutorService thread = Executors.newSingleThreadExecutor();
  private IdempotentExecutor executor;

  @AfterEach
  void tearDown() throws InterruptedException {
    FaultPoints.install(null);
    thread.shutdownNow();
    thread.awaitTermination(30, TimeUnit.SECONDS);
    if (executor != null) {
      executor.close();
    }
  }

  /**
   * The loop's thread is interrupted while the loop makes its last commit (the executor running the
   * loop shut down at once as the loop stops, after a close that waited in vain): the commit threw,
   * and the consumer was not closed, so it stayed in its group, holding its partitions from the
   * next consumer, and the offset owed was lost.
   */
  @Test
  void aLoopInterruptedInItsLastCommitStillCommitsAndLeavesItsGroup() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    TopicPartition partition = new TopicPartition(fixture.topic(), 0);
    AtomicReference<DedupPollLoop<String, String>> own = new AtomicReference<>();
    AtomicBoolean stopping = new AtomicBoolean();
    AtomicInteger applied = new AtomicInteger();
    DedupPollLoop<String, String> loop =
        loop(
            record -> {
              applied.incrementAndGet();
              stopping.set(true);
              own.get().close();
            });
    own.set(loop);
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.BEFORE_OFFSET_COMMIT
              && stopping.compareAndSet(true, false)) {
            Thread.currentThread().interrupt();
          }
        });
    Future<?> run = thread.submit(loop);
    ProducerRecord<String, String> record =
        new ProducerRecord<>(fixture.topic(), 0, "ORD-1", "charge ORD-1");
    record.headers().add(KEY_HEADER, "ORD-1".getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(record).get();

    Throwable end = null;
    try {
      run.get(WAIT.toSeconds(), TimeUnit.SECONDS);
    } catch (ExecutionException e) {
      end = e.getCause();
    }
    assertThat(applied).hasValue(1);
    assertThat(members())
        .as("the consumer left its group as the loop ended (it ended with %s)", end)
        .isZero();
    assertThat(TestKafka.committedOffsets(fixture.group()))
        .as("the offset owed for the handled record")
        .containsEntry(partition, 1L);
  }

  /**
   * The loop is closed from a thread already interrupted (a shutdown on a thread of an executor
   * stopped with {@code shutdownNow}) while its handler runs: close() returned at once, and the
   * application went on to close its executor and DataSource under the handler, whose key stayed
   * PROCESSING. It now waits for the handler and the last commit, and keeps the interrupt.
   */
  @Test
  void aCloseOnAnInterruptedThreadStillWaitsForTheHandlerInHand() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    TopicPartition partition = new TopicPartition(fixture.topic(), 0);
    CountDownLatch handlerStarted = new CountDownLatch(1);
    DedupPollLoop<String, String> loop =
        loop(
            record -> {
              handlerStarted.countDown();
              Thread.sleep(1500);
            });
    thread.submit(loop);
    ProducerRecord<String, String> record =
        new ProducerRecord<>(fixture.topic(), 0, "ORD-2", "charge ORD-2");
    record.headers().add(KEY_HEADER, "ORD-2".getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(record).get();
    assertThat(handlerStarted.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();

    AtomicReference<Optional<DedupStatus>> statusOnReturn = new AtomicReference<>();
    AtomicReference<Integer> membersOnReturn = new AtomicReference<>();
    AtomicBoolean stillInterrupted = new AtomicBoolean();
    Thread closer =
        new Thread(
            () -> {
              Thread.currentThread().interrupt();
              loop.close();
              stillInterrupted.set(Thread.interrupted());
              statusOnReturn.set(
                  fixture.store().find(DedupKey.of(BIZ_TYPE, "ORD-2")).map(DedupRecord::status));
              try {
                membersOnReturn.set(members());
              } catch (Exception e) {
                throw new IllegalStateException(e);
              }
            });
    closer.start();
    closer.join(WAIT.toMillis());
    assertThat(statusOnReturn.get())
        .as("the handler's outcome when close() returned")
        .contains(DedupStatus.SUCCESS);
    // The loop's future completes a moment after its last step, so the consumer's leave is what
    // shows that close() waited for the consumer's close.
    assertThat(membersOnReturn.get())
        .as("members of the group when close() returned (the consumer closed)")
        .isZero();
    assertThat(stillInterrupted).as("the caller's interrupt kept").isTrue();
    assertThat(TestKafka.committedOffsets(fixture.group()))
        .as("the offset of the handled record")
        .containsEntry(partition, 1L);
  }

  /** A loop over the test's topic whose records run {@code handler} once per key. */
  private DedupPollLoop<String, String> loop(RecordHandler<String, String> handler) {
    executor = IdempotentExecutor.builder(fixture.store()).build();
    return LoopFixture.quick(
            DedupPollLoop.builder(
                TestKafka.consumerConfig(fixture.group()),
                List.of(fixture.topic()),
                IdempotentRecordHandler.<String, String>builder(executor)
                    .bizType(BIZ_TYPE)
                    .key(KeyExtractors.header(KEY_HEADER))
                    .handler(handler)
                    .build()))
        .deadLetterHandler((record, reason) -> {})
        .build();
  }

  private static int members() throws Exception {
    Properties properties = new Properties();
    properties.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, TestKafka.bootstrapServers());
    try (Admin admin = Admin.create(properties)) {
      return admin
          .describeConsumerGroups(List.of(fixture.group()))
          .all()
          .get()
          .get(fixture.group())
          .members()
          .size();
    }
  }
}
