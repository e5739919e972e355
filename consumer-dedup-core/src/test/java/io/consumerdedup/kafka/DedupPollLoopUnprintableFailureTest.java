package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.KEY_HEADER;
import static io.consumerdedup.kafka.LoopFixture.header;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.concurrent.Callable;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Deserializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * A handler's exception whose {@code toString()} throws (one that prints a field it cannot read, a
 * lazily loaded entity, a closed resource): the loop and the dead-letter publisher describe it in
 * their logs, and a description that throws must neither end the loop nor make the written dead
 * letter look unwritten.
 */
class DedupPollLoopUnprintableFailureTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_unprintable");

  private IdempotentExecutor executor;
  private String topic;
  private String group;

  @BeforeEach
  void setUp() {
    topic = fixture.topic();
    group = fixture.group();
    executor = IdempotentExecutor.builder(fixture.store()).build();
  }

  @AfterEach
  void tearDown() {
    executor.close();
  }

  /** An exception with a message whose own description fails. */
  static final class UnprintableException extends IllegalStateException {
    UnprintableException(String message) {
      super(message);
    }

    @Override
    public String toString() {
      throw new IllegalStateException("the failure's description cannot be built");
    }
  }

  @Test
  void aFailureWhoseToStringThrowsIsRetriedThenDeadLetteredOnceAndTheLoopGoesOn() throws Exception {
    TestKafka.createTopics(1, topic, topic + "-dlt");
    send("U-1");
    send("G-2");
    AtomicInteger runsOfU1 = new AtomicInteger();
    IdempotentRecordHandler<String, String> handler =
        handler(
            record -> {
              if (LoopFixture.orderNo(record).equals("U-1")) {
                runsOfU1.incrementAndGet();
                throw new UnprintableException("card declined");
              }
            });
    DedupPollLoop<String, String> loop =
        loop(
                TestKafka.consumerConfig(group),
                handler,
                KafkaDeadLetterPublisher.builder(fixture.producer()).groupId(group).build())
            .maxAttempts(3)
            .build();

    TopicPartition deadLetters = new TopicPartition(topic + "-dlt", 0);
    runPastBoth(
        loop,
        "the loop goes on past a failure whose description throws",
        // or writes a second dead letter of U-1
        () -> TestKafka.endOffset(deadLetters) > 1,
        () -> {
          assertThat(TestKafka.endOffset(deadLetters)).as("dead letters of U-1").isEqualTo(1L);
          // Time for any second dead letter of U-1 (the loop's hold back-off is 200 ms).
          Thread.sleep(1500);
          assertThat(TestKafka.committedOffsets(group))
              .containsEntry(new TopicPartition(topic, 0), 2L);
        });

    assertThat(runsOfU1).as("runs of U-1's handler").hasValue(3);
    List<ConsumerRecord<String, String>> dlt = TestKafka.readWritten(topic + "-dlt");
    assertThat(dlt).as("dead letters of U-1").hasSize(1);
    assertThat(header(dlt.get(0), KafkaDeadLetterPublisher.EXCEPTION_CLASS_HEADER))
        .isEqualTo(UnprintableException.class.getName());
    assertThat(header(dlt.get(0), KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
        .isEqualTo("card declined");
  }

  // Keys of their own: the table is shared by the class's tests, and U-1's spent attempts would
  // leave the other test fewer.
  @Test
  void aDeadLetterHandlerFailingWithAnUnprintableExceptionIsTriedAgainAndTheLoopGoesOn()
      throws Exception {
    TestKafka.createTopics(1, topic);
    send("U-3");
    send("G-4");
    List<String> deadLettered = new CopyOnWriteArrayList<>();
    AtomicInteger deadLetterTries = new AtomicInteger();
    DeadLetterHandler<String, String> deadLetters =
        (record, reason) -> {
          if (deadLetterTries.incrementAndGet() == 1) {
            throw new IllegalStateException() {
              private static final long serialVersionUID = 1L;

              @Override
              public String getMessage() {
                throw new IllegalStateException("the dead-letter table's session is closed");
              }
            };
          }
          deadLettered.add(LoopFixture.orderNo(record));
        };
    IdempotentRecordHandler<String, String> handler =
        handler(
            record -> {
              if (LoopFixture.orderNo(record).equals("U-3")) {
                throw new IllegalStateException("card declined");
              }
            });
    DedupPollLoop<String, String> loop =
        loop(TestKafka.consumerConfig(group), handler, deadLetters).maxAttempts(1).build();

    runPastBoth(
        loop,
        "the loop goes on past a dead-letter handler's exception that cannot be printed",
        () -> false,
        () -> {
          assertThat(deadLettered).as("dead letters written").containsExactly("U-3");
        });
  }

  /**
   * A handler that calls another idempotent service and passes its "try later" on wrapped in an
   * exception of its own, whose message cannot be built: the record waits and is tried again.
   */
  @Test
  void aRetryLaterFailureWhoseGetMessageThrowsIsTriedAgainAndTheLoopGoesOn() throws Exception {
    TestKafka.createTopics(1, topic);
    send("W-7");
    send("G-8");
    List<String> applied = new CopyOnWriteArrayList<>();
    AtomicInteger runsOfW7 = new AtomicInteger();
    IdempotentRecordHandler<String, String> handler =
        handler(
            record -> {
              String orderNo = LoopFixture.orderNo(record);
              if (orderNo.equals("W-7") && runsOfW7.incrementAndGet() == 1) {
                throw new IllegalStateException(
                    new DedupStoreUnavailableException(
                        "the ledger's dedup store is failing over", null, null, null)) {
                  private static final long serialVersionUID = 1L;

                  @Override
                  public String getMessage() {
                    throw new IllegalStateException("the ledger client is closed");
                  }
                };
              }
              applied.add(orderNo);
            });
    DedupPollLoop<String, String> loop =
        loop(
                TestKafka.consumerConfig(group),
                handler,
                (record, reason) -> {
                  throw new AssertionError("nothing is dead-lettered here: " + record);
                })
            .build();

    runPastBoth(
        loop,
        "the loop goes on past a try-later failure whose message cannot be built",
        () -> false,
        () -> {
          assertThat(applied).as("records applied").containsExactly("W-7", "G-8");
        });
  }

  /**
   * An application's processor around the handler (metrics, tracing) whose {@code prepare}, {@code
   * settle} and {@code attempts} fail with exceptions that cannot describe themselves: the loop
   * logs each and goes on, counting attempts itself and delivering an unsettled poll again.
   */
  @Test
  void aProcessorFailingWithUnprintableExceptionsStillHasEachRecordDecided() throws Exception {
    TestKafka.createTopics(1, topic, topic + "-dlt");
    send("U-9");
    send("G-10");
    AtomicInteger runsOfU9 = new AtomicInteger();
    List<String> applied = new CopyOnWriteArrayList<>();
    IdempotentRecordHandler<String, String> handler =
        handler(
            record -> {
              if (LoopFixture.orderNo(record).equals("U-9")) {
                runsOfU9.incrementAndGet();
                throw new IllegalStateException("card declined");
              }
              applied.add(LoopFixture.orderNo(record));
            });
    AtomicInteger prepares = new AtomicInteger();
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
            if (prepares.incrementAndGet() == 1) {
              throw unprintable("the tracing exporter is closed");
            }
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
    DedupPollLoop<String, String> loop =
        loop(
                TestKafka.consumerConfig(group),
                decorated,
                KafkaDeadLetterPublisher.builder(fixture.producer()).groupId(group).build())
            .maxAttempts(2)
            .build();

    runPastBoth(
        loop,
        "the loop goes on past a processor's exceptions that cannot be printed",
        () -> false,
        () -> {});
    List<ConsumerRecord<String, String>> dlt = TestKafka.readWritten(topic + "-dlt");
    assertThat(dlt).as("dead letters of U-9").hasSize(1);
    assertThat(runsOfU9).as("runs of U-9's handler").hasValue(2);
    assertThat(applied).as("records applied").containsExactly("G-10");
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

  /** A value deserializer whose exception, for a value naming {@code poison}, cannot be printed. */
  public static final class UnprintableRejectingDeserializer implements Deserializer<String> {
    @Override
    public String deserialize(String topic, byte[] data) {
      String value = new String(data, StandardCharsets.UTF_8);
      if (value.contains("poison")) {
        throw new IllegalArgumentException() {
          private static final long serialVersionUID = 1L;

          @Override
          public String getMessage() {
            throw new IllegalStateException("could not initialize the lazily loaded entity");
          }
        };
      }
      return value;
    }
  }

  @Test
  void aValueTheDeserializerRejectsWithAnUnprintableExceptionIsDeadLetteredAndTheLoopGoesOn()
      throws Exception {
    TestKafka.createTopics(1, topic);
    send("P-5", "charge poison");
    send("G-6");
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
    IdempotentRecordHandler<String, String> handler =
        handler(record -> applied.add(LoopFixture.orderNo(record)));
    Map<String, Object> config = TestKafka.consumerConfig(group);
    config.put(
        ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, UnprintableRejectingDeserializer.class);
    DedupPollLoop<String, String> loop = loop(config, handler, deadLetters).build();

    runPastBoth(
        loop,
        "the loop goes on past a value rejected with an exception that cannot be printed",
        () -> false,
        () -> {
          assertThat(deadLettered)
              .as("dead letters of the rejected value, by offset")
              .containsExactly(0L);
          assertThat(applied).as("records applied after it").containsExactly("G-6");
        });
  }

  /** What a test checks while its loop still runs. */
  @FunctionalInterface
  private interface WhileRunning {
    void check() throws Exception;
  }

  /**
   * Runs {@code loop} until it ends or has committed past both records of partition 0 (or, sooner,
   * until {@code orUntil}), asserts that it still runs ({@code why}), then checks {@code
   * whileRunning} before stopping it.
   */
  private void runPastBoth(
      DedupPollLoop<String, String> loop,
      String why,
      Callable<Boolean> orUntil,
      WhileRunning whileRunning)
      throws Exception {
    TopicPartition partition = new TopicPartition(topic, 0);
    try (RunningLoop running = RunningLoop.start(loop)) {
      await()
          .atMost(LoopFixture.WAIT)
          .until(
              () ->
                  !running.isRunning()
                      || orUntil.call()
                      || Long.valueOf(2L).equals(TestKafka.committedOffsets(group).get(partition)));
      assertThat(running.isRunning()).as(why).isTrue();
      whileRunning.check();
    }
  }

  /** This test's records handled by {@code work}, in this test's group. */
  private IdempotentRecordHandler<String, String> handler(RecordHandler<String, String> work) {
    return LoopFixture.handler(executor).groupId(group).handler(work).build();
  }

  /** A quick loop over this test's topic, {@code processor} running each record. */
  private DedupPollLoop.Builder<String, String> loop(
      Map<String, Object> config,
      RecordProcessor<String, String> processor,
      DeadLetterHandler<String, String> deadLetters) {
    return LoopFixture.quick(
        DedupPollLoop.builder(config, List.of(topic), processor).deadLetterHandler(deadLetters));
  }

  private void send(String orderNo) throws Exception {
    send(orderNo, "charge " + orderNo);
  }

  private void send(String orderNo, String value) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, 0, "customer-7", value);
    record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(record).get();
  }
}
