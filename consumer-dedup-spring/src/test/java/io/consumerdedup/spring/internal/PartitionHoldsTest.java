package io.consumerdedup.spring.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.testing.TestKafka;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.Executor;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.ReentrantLock;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.listener.ConcurrentMessageListenerContainer;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.MessageListener;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.TopicPartitionOffset;

/**
 * Holds on real concurrent listener containers (the kind Spring Boot makes), consuming from the
 * in-JVM broker: a hold must leave the partition paused in the container consuming it, whatever
 * happened to the container since the last hold, and a container's resume must not wait for another
 * one.
 */
class PartitionHoldsTest {
  private final List<ConcurrentMessageListenerContainer<String, String>> containers =
      new ArrayList<>();
  private final MockConsumer<String, String> consumer = new MockConsumer<>("earliest");

  @AfterEach
  void stopContainers() {
    containers.forEach(ConcurrentMessageListenerContainer::stop);
  }

  @Test
  void aHoldAfterTheContainerRestartedPausesThePartitionAgain() {
    Lockable container = started("holds-restart");
    ContainerPartitionHolds holds =
        new ContainerPartitionHolds(Duration.ofMinutes(1), Duration.ofMinutes(5));
    ConsumerRecord<String, String> record = record("holds-restart", 7);

    holds.hold(List.of(record), consumer, container);
    MessageListenerContainer before = owner(container, "holds-restart");
    assertThat(before.isPartitionPauseRequested(partition("holds-restart"))).isTrue();

    // A deploy, or a stop for maintenance, while the partition is paused: its pause goes with the
    // consumer that had it, and the record comes again at once.
    container.stop();
    container.start();
    MessageListenerContainer after = awaitOwner(container, "holds-restart");
    assertThat(after.isPartitionPauseRequested(partition("holds-restart"))).isFalse();

    Duration wait = holds.hold(List.of(record), consumer, container);

    assertThat(after.isPartitionPauseRequested(partition("holds-restart")))
        .as("paused again, not delivered again at once, over and over")
        .isTrue();
    assertThat(wait)
        .as("the second hold of the record backs off further")
        .isEqualTo(Duration.ofMinutes(2));
  }

  @Test
  void aContainerBusyUnderItsLifecycleLockDelaysNoOtherContainersResume() {
    Lockable busy = started("holds-busy");
    Lockable other = started("holds-other");
    ContainerPartitionHolds holds =
        new ContainerPartitionHolds(Duration.ofMillis(200), Duration.ofMillis(200));

    ReentrantLock lifecycle = busy.lifecycleLock();
    lifecycle.lock(); // as stop() holds it, here on the test's own thread
    try {
      holds.hold(List.of(record("holds-busy", 0)), consumer, busy);
      holds.hold(List.of(record("holds-other", 0)), consumer, other);
      MessageListenerContainer otherOwner = owner(other, "holds-other");
      assertThat(otherOwner.isPartitionPauseRequested(partition("holds-other"))).isTrue();

      await()
          .atMost(Duration.ofSeconds(20))
          .until(() -> !otherOwner.isPartitionPauseRequested(partition("holds-other")));
      assertThat(lifecycle.isHeldByCurrentThread()).as("the busy container still is").isTrue();
    } finally {
      lifecycle.unlock();
    }
  }

  /**
   * The application paused the partition itself (the container's {@code pausePartition}, say while
   * a downstream system is down) before a record of the poll in hand was held: the hold's resume,
   * after its back-off, must not undo the application's pause. Before, it did, and the records sent
   * meanwhile were delivered while the application had the partition paused.
   */
  @Test
  void aHoldDoesNotResumeAPartitionTheApplicationPausedItself() throws Exception {
    AtomicInteger delivered = new AtomicInteger();
    Lockable container = started("holds-app-paused", record -> delivered.incrementAndGet());
    ContainerPartitionHolds holds =
        new ContainerPartitionHolds(Duration.ofMillis(200), Duration.ofMillis(200));
    TopicPartition partition = partition("holds-app-paused");

    container.pausePartition(partition);
    MessageListenerContainer owner = owner(container, "holds-app-paused");
    await().atMost(Duration.ofSeconds(20)).until(() -> owner.isPartitionPaused(partition));
    holds.hold(List.of(record("holds-app-paused", 0)), consumer, container);
    try (KafkaProducer<String, String> producer = TestKafka.producer()) {
      producer.send(new ProducerRecord<>("holds-app-paused", "key", "sent while paused")).get();
    }

    Thread.sleep(2_000); // ten back-offs
    assertThat(owner.isPartitionPauseRequested(partition))
        .as("still paused, as the application asked")
        .isTrue();
    assertThat(delivered).as("records delivered while paused").hasValue(0);

    container.resumePartition(partition);
    await().atMost(Duration.ofSeconds(20)).until(() -> delivered.get() == 1);
  }

  /**
   * The resume, due after the back-off, could not be handed to a thread ({@code OutOfMemoryError:
   * unable to create native thread}, the executor shut down): before, the partition stayed paused
   * for good, its records never delivered while the group counted it as consumed, and the hold's
   * pause kept any later hold of the record from resuming it either.
   */
  @Test
  void aResumeThatCouldNotStartIsTriedAgain() throws Exception {
    AtomicInteger delivered = new AtomicInteger();
    Lockable container = started("holds-resume-fails", record -> delivered.incrementAndGet());
    AtomicInteger attempts = new AtomicInteger();
    AtomicBoolean sent = new AtomicBoolean();
    // Fails the first resume, and any until the test has seen the pause and sent its record.
    Executor failing =
        task -> {
          if (attempts.getAndIncrement() == 0 || !sent.get()) {
            throw new OutOfMemoryError("unable to create native thread: possibly out of memory");
          }
          new Thread(task).start();
        };
    ContainerPartitionHolds holds =
        new ContainerPartitionHolds(Duration.ofMillis(200), Duration.ofMillis(200), failing);
    TopicPartition partition = partition("holds-resume-fails");

    holds.hold(List.of(record("holds-resume-fails", 0)), consumer, container);
    MessageListenerContainer owner = owner(container, "holds-resume-fails");
    await().atMost(Duration.ofSeconds(20)).until(() -> owner.isPartitionPaused(partition));
    try (KafkaProducer<String, String> producer = TestKafka.producer()) {
      producer.send(new ProducerRecord<>("holds-resume-fails", "key", "after the hold")).get();
    }
    sent.set(true);

    await()
        .atMost(Duration.ofSeconds(20))
        .untilAsserted(
            () ->
                assertThat(delivered)
                    .as("records of the partition delivered after its hold")
                    .hasValue(1));
    assertThat(owner.isPartitionPauseRequested(partition)).isFalse();
  }

  /**
   * The timer of the resumes could not start its thread as a hold scheduled its resume ({@code
   * OutOfMemoryError: unable to create native thread}): the partition, paused by the hold, had no
   * resume at all. Its records after the held one were never delivered while the group counted it
   * as consumed, and every later hold of the record found it paused by a hold and left it so.
   */
  @Test
  void aHoldWhoseResumeCannotBeTimedLeavesThePartitionConsumed() throws Exception {
    AtomicInteger delivered = new AtomicInteger();
    Lockable container = started("holds-timer-fails", record -> delivered.incrementAndGet());
    AtomicInteger threadsRefused = new AtomicInteger();
    ScheduledThreadPoolExecutor timer =
        new ScheduledThreadPoolExecutor(
            1,
            task -> {
              threadsRefused.incrementAndGet();
              throw new OutOfMemoryError("unable to create native thread: possibly out of memory");
            });
    ContainerPartitionHolds holds =
        new ContainerPartitionHolds(
            Duration.ofMillis(200),
            Duration.ofMillis(200),
            task -> new Thread(task).start(),
            timer);
    TopicPartition partition = partition("holds-timer-fails");
    Throwable thrownByHold = null;
    try {
      try {
        holds.hold(List.of(record("holds-timer-fails", 0)), consumer, container);
      } catch (Throwable e) {
        thrownByHold = e;
      }
      assertThat(threadsRefused).as("the timer's thread refused").hasPositiveValue();
      MessageListenerContainer owner = owner(container, "holds-timer-fails");
      // A pause the consumer has not applied yet lets the records of its poll under way through.
      await()
          .atMost(Duration.ofSeconds(20))
          .until(
              () ->
                  owner.isPartitionPaused(partition)
                      || !owner.isPartitionPauseRequested(partition));
      try (KafkaProducer<String, String> producer = TestKafka.producer()) {
        producer.send(new ProducerRecord<>("holds-timer-fails", "key", "after the hold")).get();
      }

      await()
          .atMost(Duration.ofSeconds(10))
          .untilAsserted(
              () ->
                  assertThat(delivered)
                      .as("records of the partition delivered after its hold")
                      .hasValue(1));
      assertThat(owner.isPartitionPauseRequested(partition)).isFalse();
      assertThat(thrownByHold).as("what the hold threw").isNull();
    } finally {
      timer.shutdownNow();
    }
  }

  /**
   * A resume that could not start, whose next try could not be timed either (the timer's task for
   * it could not be made: an {@code OutOfMemoryError} on the timer's thread): the retry was lost
   * with the timer task that the Error ended, and the partition stayed paused for good.
   */
  @Test
  void aResumeWhoseRetryCannotBeTimedStillResumes() throws Exception {
    AtomicInteger delivered = new AtomicInteger();
    Lockable container = started("holds-retry-untimed", record -> delivered.incrementAndGet());
    AtomicInteger schedules = new AtomicInteger();
    ScheduledThreadPoolExecutor timer =
        new ScheduledThreadPoolExecutor(1) {
          @Override
          public java.util.concurrent.ScheduledFuture<?> schedule(
              Runnable task, long delay, java.util.concurrent.TimeUnit unit) {
            if (schedules.incrementAndGet() > 1) {
              throw new OutOfMemoryError("Java heap space");
            }
            return super.schedule(task, delay, unit);
          }
        };
    AtomicBoolean sent = new AtomicBoolean();
    AtomicInteger resumesRefused = new AtomicInteger();
    // Fails the resumes until the test has sent its record.
    Executor failing =
        task -> {
          if (!sent.get()) {
            resumesRefused.incrementAndGet();
            throw new OutOfMemoryError("unable to create native thread: possibly out of memory");
          }
          new Thread(task).start();
        };
    ContainerPartitionHolds holds =
        new ContainerPartitionHolds(Duration.ofMillis(200), Duration.ofMillis(200), failing, timer);
    TopicPartition partition = partition("holds-retry-untimed");
    try {
      holds.hold(List.of(record("holds-retry-untimed", 0)), consumer, container);
      MessageListenerContainer owner = owner(container, "holds-retry-untimed");
      await()
          .atMost(Duration.ofSeconds(20))
          .until(() -> resumesRefused.get() > 0 && schedules.get() > 1);
      // A pause the consumer has not applied yet lets the records of its poll under way through.
      await()
          .atMost(Duration.ofSeconds(20))
          .until(
              () ->
                  owner.isPartitionPaused(partition)
                      || !owner.isPartitionPauseRequested(partition));
      try (KafkaProducer<String, String> producer = TestKafka.producer()) {
        producer.send(new ProducerRecord<>("holds-retry-untimed", "key", "after the hold")).get();
      }
      sent.set(true);

      await()
          .atMost(Duration.ofSeconds(10))
          .untilAsserted(
              () ->
                  assertThat(delivered)
                      .as(
                          "records of the partition delivered after its hold (schedules asked: %s)",
                          schedules.get())
                      .hasValue(1));
    } finally {
      timer.shutdownNow();
    }
  }

  private Lockable started(String topic) {
    return started(topic, record -> {});
  }

  private Lockable started(String topic, MessageListener<String, String> listener) {
    TestKafka.createTopics(1, topic);
    ContainerProperties properties = new ContainerProperties(new TopicPartitionOffset(topic, 0));
    properties.setGroupId(topic + "-" + UUID.randomUUID());
    properties.setMessageListener(listener);
    Lockable container =
        new Lockable(
            new DefaultKafkaConsumerFactory<>(TestKafka.consumerConfig(properties.getGroupId())),
            properties);
    container.setBeanName(topic);
    containers.add(container);
    container.start();
    awaitOwner(container, topic);
    List<TopicPartition> assigned = new ArrayList<>(consumer.assignment());
    assigned.add(partition(topic));
    consumer.assign(assigned);
    return container;
  }

  private static MessageListenerContainer awaitOwner(Lockable container, String topic) {
    await().atMost(Duration.ofSeconds(30)).until(() -> owner(container, topic) != container);
    return owner(container, topic);
  }

  private static MessageListenerContainer owner(Lockable container, String topic) {
    return container.getContainerFor(topic, 0);
  }

  private static TopicPartition partition(String topic) {
    return new TopicPartition(topic, 0);
  }

  private static ConsumerRecord<String, String> record(String topic, long offset) {
    return new ConsumerRecord<>(topic, 0, offset, "key", "value");
  }

  /** A concurrent container whose lifecycle lock a test can hold, as its {@code stop()} does. */
  private static final class Lockable extends ConcurrentMessageListenerContainer<String, String> {
    Lockable(DefaultKafkaConsumerFactory<String, String> factory, ContainerProperties properties) {
      super(factory, properties);
    }

    ReentrantLock lifecycleLock() {
      return lifecycleLock;
    }
  }
}
