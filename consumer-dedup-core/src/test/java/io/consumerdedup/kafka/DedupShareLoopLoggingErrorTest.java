package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.AppenderBase;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.ReplyLosingStore;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.LoggerFactory;

/**
 * {@link DedupShareLoop} under memory pressure: an {@code OutOfMemoryError} met as a poll's batch
 * claim is read keeps the poll's records acquired, to be claimed again, and the loop goes on. The
 * worker said so in an ERROR line first; a second {@code OutOfMemoryError} as that line was written
 * (Logback passes an appender's {@code Error} on) ended the loop all the same, its records given
 * back undecided, a delivery counted each: the application that restarts the loop on an {@code
 * Error} saw the record come again, and after five such ends the broker archives it unapplied. So
 * it was for a dead letter whose write threw an {@code Error}, tried again after the hold back-off.
 * An appender of the test throws that second {@code Error}.
 */
class DedupShareLoopLoggingErrorTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("share_log_error");

  private static final Duration WAIT = Duration.ofSeconds(60);

  private final Logger loopLogger = (Logger) LoggerFactory.getLogger(DedupShareLoop.class);
  private final ThrowingAppender throwing = new ThrowingAppender();
  private final List<DedupShareLoop<String, String>> loops = new CopyOnWriteArrayList<>();
  private final AtomicBoolean restarting = new AtomicBoolean(true);
  private final ExecutorService threads = Executors.newCachedThreadPool();
  private final KafkaProducer<String, String> dltProducer = TestKafka.producer();
  private String topic;
  private String group;

  /**
   * Throws an {@code OutOfMemoryError} as the next line starting with {@link #prefix} is written.
   */
  private static final class ThrowingAppender extends AppenderBase<ILoggingEvent> {
    volatile String prefix = "";
    final AtomicInteger left = new AtomicInteger();
    final AtomicInteger thrown = new AtomicInteger();

    @Override
    protected void append(ILoggingEvent event) {
      if (event.getMessage().startsWith(prefix) && left.getAndDecrement() > 0) {
        thrown.incrementAndGet();
        throw new OutOfMemoryError("Java heap space, writing the log line");
      }
    }
  }

  @BeforeEach
  void queue() {
    topic = fixture.topic();
    group = fixture.group();
    TestKafka.createTopics(1, topic, topic + "-dlt");
    TestShareGroups.configure(group, Duration.ofSeconds(5), Duration.ofSeconds(1));
    throwing.start();
    loopLogger.addAppender(throwing);
  }

  @AfterEach
  void stop() {
    loopLogger.detachAppender(throwing);
    restarting.set(false);
    loops.forEach(DedupShareLoop::close);
    threads.shutdownNow();
    dltProducer.close();
  }

  /**
   * The user sees the record applied once, on its first delivery, and no loop ended. Before the
   * fix, the loop ended on the second Error and the record was applied on its second delivery.
   */
  @Test
  void aSecondErrorAsTheBatchClaimsErrorIsLoggedDoesNotEndTheLoop() throws Exception {
    ReplyLosingStore losing = ReplyLosingStore.in(fixture.store());
    IdempotentExecutor executor =
        fixture.executor(IdempotentExecutor.builder(losing.store()).lease(Duration.ofMinutes(5)));
    List<String> runs = new CopyOnWriteArrayList<>();
    AtomicInteger loopsEnded = new AtomicInteger();
    throwing.prefix = "Could not claim";
    throwing.left.set(1);
    losing.loseNextClaimReplyTo(
        new OutOfMemoryError("Java heap space, reading the batch claim's answer"));
    threads.execute(
        () -> {
          while (restarting.get()) {
            try {
              loop(
                      executor,
                      record -> runs.add(LoopFixture.orderNo(record) + "/" + delivery(record)))
                  .run();
              return; // closed
            } catch (Error e) {
              // As an application that restarts its loop would, once the broker has the records
              // the closed consumer gave back.
              loopsEnded.incrementAndGet();
              try {
                Thread.sleep(1_000);
              } catch (InterruptedException stop) {
                return;
              }
            }
          }
        });
    send("logged-1");

    await().atMost(WAIT).alias("the record applied").until(() -> !runs.isEmpty());
    assertThat(losing.repliesLost()).as("batch claims answered with an Error").isOne();
    assertThat(throwing.thrown).as("log lines that threw an Error").hasValue(1);
    assertThat(runs).as("handler runs (order/delivery)").containsExactly("logged-1/1");
    assertThat(loopsEnded).as("loops ended on an Error").hasValue(0);
    restarting.set(false);
    loops.forEach(DedupShareLoop::close);
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3))).isEmpty();
  }

  /**
   * A record without its key; its dead letter throws an {@code OutOfMemoryError} on the first try,
   * and a second one is thrown as the worker logs that try: the user sees the one dead letter
   * written on the record's first delivery, and no loop ended. Before the fix, the loop ended on
   * the second Error, and the record's next delivery was dead-lettered.
   */
  @Test
  void aSecondErrorAsAFailedDeadLetterIsLoggedDoesNotEndTheLoop() throws Exception {
    IdempotentExecutor executor =
        fixture.executor(IdempotentExecutor.builder(fixture.store()).lease(Duration.ofMinutes(5)));
    DeadLetterHandler<String, String> publisher =
        KafkaDeadLetterPublisher.builder(dltProducer).groupId(group).build();
    List<String> tries = new CopyOnWriteArrayList<>();
    List<String> written = new CopyOnWriteArrayList<>();
    DeadLetterHandler<String, String> deadLetters =
        (record, reason) -> {
          tries.add(String.valueOf(delivery(record)));
          if (tries.size() == 1) {
            throw new OutOfMemoryError("Java heap space, copying the record");
          }
          publisher.deadLetter(record, reason);
          written.add(String.valueOf(delivery(record)));
        };
    AtomicInteger loopsEnded = new AtomicInteger();
    throwing.prefix = "Could not dead-letter";
    throwing.left.set(1);
    threads.execute(
        () -> {
          while (restarting.get()) {
            try {
              loop(executor, record -> {}, deadLetters).run();
              return; // closed
            } catch (Error e) {
              loopsEnded.incrementAndGet();
              try {
                Thread.sleep(1_000);
              } catch (InterruptedException stop) {
                return;
              }
            }
          }
        });
    ProducerRecord<String, String> keyless = new ProducerRecord<>(topic, "charge, no order-no");
    fixture.producer().send(keyless).get();

    await().atMost(WAIT).alias("the dead letter written").until(() -> !written.isEmpty());
    assertThat(throwing.thrown).as("log lines that threw an Error").hasValue(1);
    assertThat(tries).as("dead-letter tries, by delivery").containsExactly("1", "1");
    assertThat(written).as("dead letters written, by delivery").containsExactly("1");
    assertThat(loopsEnded).as("loops ended on an Error").hasValue(0);
    restarting.set(false);
    loops.forEach(DedupShareLoop::close);
    assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3))).isEmpty();
  }

  private static short delivery(org.apache.kafka.clients.consumer.ConsumerRecord<?, ?> record) {
    return record.deliveryCount().orElse((short) 0);
  }

  private DedupShareLoop<String, String> loop(
      IdempotentExecutor executor, RecordHandler<String, String> handler) {
    return loop(
        executor, handler, KafkaDeadLetterPublisher.builder(dltProducer).groupId(group).build());
  }

  private DedupShareLoop<String, String> loop(
      IdempotentExecutor executor,
      RecordHandler<String, String> handler,
      DeadLetterHandler<String, String> deadLetters) {
    IdempotentRecordHandler<String, String> records =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(LoopFixture.BIZ_TYPE)
            .key(KeyExtractors.header(LoopFixture.KEY_HEADER))
            .groupId(group)
            .handler(handler)
            .build();
    DedupShareLoop<String, String> loop =
        DedupShareLoop.builder(TestShareGroups.consumerConfig(group), List.of(topic), records)
            .deadLetterHandler(deadLetters)
            .holdBackOff(Duration.ofMillis(200), Duration.ofSeconds(1))
            .closeTimeout(Duration.ofSeconds(10))
            .build();
    loops.add(loop);
    return loop;
  }

  private void send(String orderNo) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, "charge " + orderNo);
    record.headers().add(LoopFixture.KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(record).get();
  }
}
