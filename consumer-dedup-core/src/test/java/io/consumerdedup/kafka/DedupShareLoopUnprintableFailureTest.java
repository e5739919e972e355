package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.kafka.DedupPollLoopUnprintableFailureTest.UnprintableException;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * As {@link DedupPollLoopUnprintableFailureTest}, for {@link DedupShareLoop}: a handler's exception
 * whose {@code toString()} throws is released for another delivery, then dead-lettered once its
 * attempts are spent, and the records after it are applied.
 */
class DedupShareLoopUnprintableFailureTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("share_unprintable");

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
  }

  @Test
  void aFailureWhoseToStringThrowsIsReleasedThenDeadLetteredOnceAndTheNextRecordIsApplied()
      throws Exception {
    String topic = fixture.topic();
    String group = fixture.group();
    TestKafka.createTopics(1, topic, topic + "-dlt");
    TestShareGroups.configure(group, Duration.ofSeconds(15), Duration.ofSeconds(1));
    send(topic, "U-1");
    send(topic, "G-2");
    AtomicInteger runsOfU1 = new AtomicInteger();
    AtomicInteger runsOfG2 = new AtomicInteger();
    executor = IdempotentExecutor.builder(fixture.store()).build();
    IdempotentRecordHandler<String, String> handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(LoopFixture.BIZ_TYPE)
            .key(KeyExtractors.header(LoopFixture.KEY_HEADER))
            .groupId(group)
            .handler(
                record -> {
                  if (LoopFixture.orderNo(record).equals("U-1")) {
                    runsOfU1.incrementAndGet();
                    throw new UnprintableException("card declined");
                  }
                  runsOfG2.incrementAndGet();
                })
            .build();
    loop =
        DedupShareLoop.builder(TestShareGroups.consumerConfig(group), List.of(topic), handler)
            .deadLetterHandler(
                KafkaDeadLetterPublisher.<String, String>builder(fixture.producer())
                    .groupId(group)
                    .build())
            .maxAttempts(3)
            .retryBackOff(Duration.ofMillis(50))
            .closeTimeout(Duration.ofSeconds(10))
            .build();
    threads.execute(loop);

    assertThat(TestKafka.readFromStart(topic + "-dlt", 1, Duration.ofSeconds(20)))
        .as("dead letters of U-1")
        .hasSize(1);
    // Time for a second dead letter of U-1, had there been one.
    List<ConsumerRecord<String, String>> dead =
        TestKafka.readFromStart(topic + "-dlt", 2, Duration.ofSeconds(2));
    assertThat(dead).as("dead letters of U-1, a while later").hasSize(1);
    assertThat(LoopFixture.orderNo(dead.get(0))).isEqualTo("U-1");
    assertThat(LoopFixture.header(dead.get(0), KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
        .isEqualTo("card declined");
    assertThat(runsOfU1).as("runs of U-1's handler").hasValue(3);
    assertThat(runsOfG2).as("runs of G-2's handler").hasValue(1);
    loop.close();
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3)))
        .as("records left in the share group")
        .isEmpty();
  }

  /**
   * The dead-letter handler's first try fails with an exception whose {@code getMessage()} throws:
   * the worker logs it (Logback prints it in the log call) and must still keep the record for the
   * next try rather than end its thread with the record undecided.
   */
  @Test
  void aDeadLetterHandlerFailingWithAnUnprintableExceptionIsTriedAgainAndTheNextRecordIsApplied()
      throws Exception {
    String topic = fixture.topic();
    String group = fixture.group();
    TestKafka.createTopics(1, topic);
    TestShareGroups.configure(group, Duration.ofSeconds(15), Duration.ofSeconds(1));
    send(topic, "U-3");
    send(topic, "G-4");
    List<String> applied = new CopyOnWriteArrayList<>();
    List<String> deadLettered = new CopyOnWriteArrayList<>();
    AtomicInteger deadLetterTries = new AtomicInteger();
    DeadLetterHandler<String, String> deadLetters =
        (record, reason) -> {
          if (deadLetterTries.incrementAndGet() == 1) {
            throw new IllegalStateException() {
              private static final long serialVersionUID = 1L;

              @Override
              public String getMessage() {
                throw new IllegalStateException("the dead-letter table's connection is closed");
              }
            };
          }
          deadLettered.add(LoopFixture.orderNo(record));
        };
    executor = IdempotentExecutor.builder(fixture.store()).build();
    IdempotentRecordHandler<String, String> handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(LoopFixture.BIZ_TYPE)
            .key(KeyExtractors.header(LoopFixture.KEY_HEADER))
            .groupId(group)
            .handler(
                record -> {
                  if (LoopFixture.orderNo(record).equals("U-3")) {
                    throw new IllegalStateException("card declined");
                  }
                  applied.add(LoopFixture.orderNo(record));
                })
            .build();
    loop =
        DedupShareLoop.builder(TestShareGroups.consumerConfig(group), List.of(topic), handler)
            .deadLetterHandler(deadLetters)
            .maxAttempts(1)
            .retryBackOff(Duration.ofMillis(50))
            .closeTimeout(Duration.ofSeconds(10))
            .build();
    threads.execute(loop);

    await()
        .atMost(Duration.ofSeconds(20))
        .until(() -> deadLettered.contains("U-3") && applied.contains("G-4"));
    assertThat(deadLettered).as("dead letters written").containsExactly("U-3");
    assertThat(applied).as("records applied").containsExactly("G-4");
    loop.close();
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3)))
        .as("records left in the share group")
        .isEmpty();
  }

  /**
   * The deserializer rejects a value with an exception whose {@code getMessage()} throws: the
   * loop's ERROR line about the record (whose cause Logback prints) must not end the worker before
   * the record is dead-lettered.
   */
  @Test
  void aValueTheDeserializerRejectsWithAnUnprintableExceptionIsDeadLetteredAndTheNextIsApplied()
      throws Exception {
    String topic = fixture.topic();
    String group = fixture.group();
    TestKafka.createTopics(1, topic);
    TestShareGroups.configure(group, Duration.ofSeconds(15), Duration.ofSeconds(1));
    send(topic, "P-5", "charge poison");
    send(topic, "G-6");
    List<String> applied = new CopyOnWriteArrayList<>();
    List<Long> deadLettered = new CopyOnWriteArrayList<>();
    DeadLetterHandler<String, String> deadLetters =
        new DeadLetterHandler<>() {
          @Override
          public void deadLetter(ConsumerRecord<String, String> record, Exception reason) {
            throw new AssertionError("no typed record is dead-lettered here: " + record);
          }

          @Override
          public void deadLetterUndeserializable(
              ConsumerRecord<byte[], byte[]> record, Exception reason) {
            deadLettered.add(record.offset());
          }
        };
    executor = IdempotentExecutor.builder(fixture.store()).build();
    IdempotentRecordHandler<String, String> handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(LoopFixture.BIZ_TYPE)
            .key(KeyExtractors.header(LoopFixture.KEY_HEADER))
            .groupId(group)
            .handler(record -> applied.add(LoopFixture.orderNo(record)))
            .build();
    Map<String, Object> config = TestShareGroups.consumerConfig(group);
    config.put(
        ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
        DedupPollLoopUnprintableFailureTest.UnprintableRejectingDeserializer.class);
    loop =
        DedupShareLoop.builder(config, List.of(topic), handler)
            .deadLetterHandler(deadLetters)
            .closeTimeout(Duration.ofSeconds(10))
            .build();
    threads.execute(loop);

    await()
        .atMost(Duration.ofSeconds(20))
        .until(() -> !deadLettered.isEmpty() && applied.contains("G-6"));
    assertThat(deadLettered)
        .as("dead letters of the rejected value, by offset")
        .containsExactly(0L);
    assertThat(applied).as("records applied").containsExactly("G-6");
    loop.close();
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3)))
        .as("records left in the share group")
        .isEmpty();
  }

  /**
   * An application's processor (one that decorates the handler) cannot read a record's attempts,
   * nor settle a poll once, and says so with an exception whose {@code getMessage()} throws: the
   * worker logs each (Logback prints it in the log call) and must go on, counting the attempts
   * itself and processing the unsettled record again, rather than end its thread with the poll
   * undecided while the loop renews its locks for good.
   */
  @Test
  void aProcessorFailingWithUnprintableExceptionsStillHasEachRecordDecided() throws Exception {
    String topic = fixture.topic();
    String group = fixture.group();
    TestKafka.createTopics(1, topic, topic + "-dlt");
    TestShareGroups.configure(group, Duration.ofSeconds(15), Duration.ofSeconds(1));
    send(topic, "U-7");
    send(topic, "G-8");
    AtomicInteger runsOfU7 = new AtomicInteger();
    List<String> applied = new CopyOnWriteArrayList<>();
    executor = IdempotentExecutor.builder(fixture.store()).build();
    IdempotentRecordHandler<String, String> handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(LoopFixture.BIZ_TYPE)
            .key(KeyExtractors.header(LoopFixture.KEY_HEADER))
            .groupId(group)
            .handler(
                record -> {
                  if (LoopFixture.orderNo(record).equals("U-7")) {
                    runsOfU7.incrementAndGet();
                    throw new IllegalStateException("card declined");
                  }
                  applied.add(LoopFixture.orderNo(record));
                })
            .build();
    AtomicInteger settles = new AtomicInteger();
    RecordProcessor<String, String> decorated =
        new RecordProcessor<>() {
          @Override
          public Outcome process(ConsumerRecord<String, String> record) {
            return handler.process(record);
          }

          @Override
          public void prepare(List<ConsumerRecord<String, String>> records) {
            handler.prepare(records);
          }

          @Override
          public List<ConsumerRecord<String, String>> settle() {
            List<ConsumerRecord<String, String>> unrecorded = handler.settle();
            if (settles.incrementAndGet() == 1) {
              throw unprintable("the metrics registry is closed");
            }
            return unrecorded;
          }

          @Override
          public OptionalInt attempts(ConsumerRecord<String, String> record) {
            throw unprintable("the attempts table's connection is closed");
          }
        };
    loop =
        DedupShareLoop.builder(TestShareGroups.consumerConfig(group), List.of(topic), decorated)
            .deadLetterHandler(
                KafkaDeadLetterPublisher.<String, String>builder(fixture.producer())
                    .groupId(group)
                    .build())
            .maxAttempts(2)
            .retryBackOff(Duration.ofMillis(50))
            .holdBackOff(Duration.ofMillis(50), Duration.ofMillis(200))
            .closeTimeout(Duration.ofSeconds(10))
            .build();
    threads.execute(loop);

    List<ConsumerRecord<String, String>> dead =
        TestKafka.readFromStart(topic + "-dlt", 1, Duration.ofSeconds(20));
    assertThat(dead).as("dead letters of U-7").hasSize(1);
    assertThat(LoopFixture.orderNo(dead.get(0))).isEqualTo("U-7");
    assertThat(runsOfU7).as("runs of U-7's handler").hasValue(2);
    assertThat(applied).as("records applied").containsExactly("G-8");
    loop.close();
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3)))
        .as("records left in the share group")
        .isEmpty();
  }

  /** An exception whose {@code getMessage()} throws {@code why}. */
  private static RuntimeException unprintable(String why) {
    return new IllegalStateException() {
      private static final long serialVersionUID = 1L;

      @Override
      public String getMessage() {
        throw new IllegalStateException(why);
      }
    };
  }

  private static void send(String topic, String orderNo) throws Exception {
    send(topic, orderNo, "charge " + orderNo);
  }

  private static void send(String topic, String orderNo, String value) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, 0, null, value);
    record.headers().add(LoopFixture.KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(record).get();
  }
}
