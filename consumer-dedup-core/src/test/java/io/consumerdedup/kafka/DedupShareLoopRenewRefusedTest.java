package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The consumer refuses the lock renewal of a record it no longer holds (its acquisition was lost):
 * {@code acknowledge(record, RENEW)} throws {@link IllegalStateException}, and the broker delivers
 * the record again. Against the real broker and PostgreSQL, what a user of a Kafka queue would
 * notice.
 */
class DedupShareLoopRenewRefusedTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("share_renew");

  /**
   * Renewed every third of it; the waits below are counted in locks, so a shorter one shortens the
   * tests, down to the 2 s that leave a loaded machine 1.3 s between renewals.
   */
  private static final Duration LOCK = Duration.ofSeconds(2);

  private static final Duration MAX_HOLD = Duration.ofMillis(500);

  private final KafkaProducer<String, String> dltProducer = TestKafka.producer();
  private final ExecutorService threads = Executors.newCachedThreadPool();
  private IdempotentExecutor executor;
  private DedupShareLoop<String, String> loop;

  @AfterEach
  void stop() {
    if (loop != null) {
      loop.close();
    }
    threads.shutdownNow();
    if (executor != null) {
      executor.close();
    }
    dltProducer.close();
  }

  /** A handler whose every run fails, counted in {@code runs}, on a new executor. */
  private IdempotentRecordHandler<String, String> alwaysFailing(String group, AtomicInteger runs) {
    executor = IdempotentExecutor.builder(fixture.store()).lease(Duration.ofMinutes(5)).build();
    return IdempotentRecordHandler.<String, String>builder(executor)
        .bizType(LoopFixture.BIZ_TYPE)
        .key(KeyExtractors.header(LoopFixture.KEY_HEADER))
        .groupId(group)
        .handler(
            record -> {
              runs.incrementAndGet();
              throw new IllegalStateException("payment provider says no");
            })
        .build();
  }

  /**
   * A record whose attempts are spent waits for its dead letter (the dead-letter topic out of
   * reach), kept acquired, when the consumer refuses its lock renewal. The loop forgot the record
   * but its worker went on retrying the dead letter for the delivery no longer this consumer's, and
   * wrote it once the topic took it, beside the dead letter the new delivery wrote: two dead
   * letters of one record. Here the new delivery reaches the loop only after a pause of its thread
   * longer than the retry back-off, as when it goes to another consumer of the group.
   */
  @Test
  void aRecordWhoseRenewalIsRefusedIsDeadLetteredOnceByItsNewDelivery() throws Exception {
    String topic = fixture.topic();
    String group = fixture.group();
    TestKafka.createTopics(1, topic);
    TestShareGroups.configure(group, LOCK, Duration.ofSeconds(1));
    send(topic, "refused-1", "charge 5.00");
    AtomicInteger runs = new AtomicInteger();
    AtomicBoolean refused = new AtomicBoolean();
    AtomicBoolean paused = new AtomicBoolean();
    DeadLetterHandler<String, String> publisher =
        KafkaDeadLetterPublisher.<String, String>builder(dltProducer).groupId(group).build();

    IdempotentRecordHandler<String, String> handler = alwaysFailing(group, runs);
    loop =
        DedupShareLoop.builder(TestShareGroups.consumerConfig(group), List.of(topic), handler)
            .deadLetterHandler(
                (record, reason) -> {
                  // Out of reach until the renewal was refused: the record waits, kept acquired.
                  if (!refused.get()) {
                    throw new IllegalStateException("dead-letter topic unreachable");
                  }
                  publisher.deadLetter(record, reason);
                })
            .maxAttempts(1)
            .holdBackOff(Duration.ofMillis(200), MAX_HOLD)
            .closeTimeout(Duration.ofSeconds(10))
            .build(config -> refusingFirstRenewal(config, () -> true, refused, paused));
    threads.execute(loop);

    List<ConsumerRecord<String, String>> dead =
        TestKafka.readFromStart(topic + "-dlt", 1, Duration.ofSeconds(60));
    assertThat(refused).as("the consumer refused the renewal").isTrue();
    assertThat(paused).as("the loop's thread paused past the retry back-off").isTrue();
    assertThat(dead).hasSize(1);
    assertThat(LoopFixture.orderNo(dead.get(0))).isEqualTo("refused-1");
    assertThat(TestKafka.readFromStart(topic + "-dlt", 2, Duration.ofSeconds(4)))
        .as("one dead letter, not one more for the delivery whose renewal was refused")
        .hasSize(1);
    assertThat(runs).as("handler runs").hasValue(1);
    assertThat(status("refused-1")).contains(DedupStatus.FAILED);
    loop.close();
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3)))
        .as("the record rejected after its dead letter")
        .isEmpty();
  }

  /**
   * A record whose handler failed for the last time is dead-lettered, and its lock is lost before
   * its REJECT is sent (the renewal made while the dead letter was written refused): the broker
   * delivers it again. That delivery found the attempts spent and wrote a second dead letter
   * ({@code DedupAttemptsExhaustedException}), which a dead-letter consumer re-drives twice.
   */
  @Test
  void aRecordDeadLetteredForItsHandlerFailureWhoseRejectIsRefusedIsDeadLetteredOnce()
      throws Exception {
    String topic = fixture.topic();
    String group = fixture.group();
    TestKafka.createTopics(1, topic);
    TestShareGroups.configure(group, LOCK, Duration.ofSeconds(1));
    send(topic, "lost-reject-1", "charge 7.00");
    AtomicInteger runs = new AtomicInteger();
    AtomicBoolean published = new AtomicBoolean();
    AtomicBoolean refused = new AtomicBoolean();
    DeadLetterHandler<String, String> publisher =
        KafkaDeadLetterPublisher.<String, String>builder(dltProducer).groupId(group).build();

    IdempotentRecordHandler<String, String> handler = alwaysFailing(group, runs);
    loop =
        DedupShareLoop.builder(TestShareGroups.consumerConfig(group), List.of(topic), handler)
            .deadLetterHandler(
                (record, reason) -> {
                  publisher.deadLetter(record, reason);
                  if (published.compareAndSet(false, true)) {
                    // Past a renewal (every third of the lock), which the consumer refuses.
                    try {
                      Thread.sleep(LOCK.toMillis() / 2);
                    } catch (InterruptedException e) {
                      Thread.currentThread().interrupt();
                    }
                  }
                })
            .maxAttempts(1)
            .holdBackOff(Duration.ofMillis(200), MAX_HOLD)
            .closeTimeout(Duration.ofSeconds(10))
            .build(config -> refusingFirstRenewal(config, published::get, refused, null));
    threads.execute(loop);

    List<ConsumerRecord<String, String>> dead =
        TestKafka.readFromStart(topic + "-dlt", 1, Duration.ofSeconds(60));
    assertThat(dead).hasSize(1);
    assertThat(TestKafka.readFromStart(topic + "-dlt", 2, LOCK.multipliedBy(3)))
        .as("one dead letter, none more for the delivery after the refused REJECT")
        .hasSize(1);
    assertThat(refused).as("the consumer refused the renewal after the dead letter").isTrue();
    assertThat(runs).as("handler runs").hasValue(1);
    loop.close();
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3)))
        .as("the new delivery rejected without a second dead letter")
        .isEmpty();
  }

  /**
   * A real share consumer that refuses the first RENEW of delivery 1 as a consumer that lost the
   * record's acquisition does: the record goes back to the broker (released, so it is delivered
   * again) and the acknowledgement throws. The poll after that pauses for three retry back-offs, so
   * that the new delivery reaches the loop only after the worker had its chance to act on the lost
   * one ({@code paused} null: no pause). Only renewals made once {@code armed} says so are refused.
   */
  @SuppressWarnings("unchecked")
  private static ShareConsumer<String, String> refusingFirstRenewal(
      Map<String, Object> config,
      BooleanSupplier armed,
      AtomicBoolean refused,
      @Nullable AtomicBoolean paused) {
    AtomicReference<ShareConsumer<String, String>> consumer = new AtomicReference<>();
    consumer.set(
        InterceptedShareConsumer.of(
            config,
            (method, args, call) -> {
              if (method.getName().equals("acknowledge")
                  && args.length == 2
                  && args[1] == AcknowledgeType.RENEW
                  && ((ConsumerRecord<?, ?>) args[0]).deliveryCount().orElse((short) 0) == 1
                  && armed.getAsBoolean()
                  && refused.compareAndSet(false, true)) {
                consumer
                    .get()
                    .acknowledge((ConsumerRecord<String, String>) args[0], AcknowledgeType.RELEASE);
                throw new IllegalStateException("The record's acquisition was lost");
              }
              if (method.getName().equals("poll")
                  && paused != null
                  && refused.get()
                  && paused.compareAndSet(false, true)) {
                Thread.sleep(MAX_HOLD.multipliedBy(3).toMillis());
              }
              return call.proceed();
            }));
    return consumer.get();
  }

  private static void send(String topic, String orderNo, String value) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, value);
    record.headers().add(LoopFixture.KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(record).get();
  }

  private static Optional<DedupStatus> status(String orderNo) {
    return fixture
        .store()
        .find(DedupKey.of(LoopFixture.BIZ_TYPE, orderNo))
        .map(DedupRecord::status);
  }
}
