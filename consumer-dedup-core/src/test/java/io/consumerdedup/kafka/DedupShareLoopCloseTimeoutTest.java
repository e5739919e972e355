package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.LoggerFactory;

/**
 * What a share loop's close timeout bounds, and what the loop says when it runs out: against the
 * real broker and PostgreSQL.
 */
class DedupShareLoopCloseTimeoutTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("share_close_timeout");

  private static final Duration WAIT = Duration.ofSeconds(60);
  private static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(2);

  /** What the loop's close waits beyond twice its close timeout, for a starved thread. */
  private static final Duration CLOSE_GRACE = Duration.ofSeconds(5);

  /** The consumer's own close timeout, which a close without one waits out. */
  private static final Duration CONSUMER_DEFAULT_CLOSE = Duration.ofSeconds(30);

  private final ListAppender<ILoggingEvent> loopLog = new ListAppender<>();
  private final Logger loopLogger = (Logger) LoggerFactory.getLogger(DedupShareLoop.class);
  private final ExecutorService threads = Executors.newCachedThreadPool();
  private final KafkaProducer<String, String> dltProducer = TestKafka.producer();
  private IdempotentExecutor executor;
  private String topic;
  private String group;

  @BeforeEach
  void setUp() {
    topic = fixture.topic();
    group = fixture.group();
    executor = IdempotentExecutor.builder(fixture.store()).lease(Duration.ofMinutes(5)).build();
    loopLog.start();
    loopLogger.addAppender(loopLog);
  }

  @AfterEach
  void tearDown() {
    loopLogger.detachAppender(loopLog);
    threads.shutdownNow();
    executor.close();
    dltProducer.close();
  }

  /**
   * A loop built and closed without ever running (the application stops before it started its
   * thread): its consumer's close was called without a timeout, so against a broker that does not
   * answer it took the consumer's default of 30 s, well past the close timeout the application had
   * set.
   */
  @Test
  void closingALoopThatNeverRanTakesNoLongerThanARunningLoopsStop() {
    DedupShareLoop<String, String> loop =
        builder(record -> {}).build(config -> closingAsLateAsAllowed(config));

    long started = System.nanoTime();
    loop.close();
    Duration took = Duration.ofNanos(System.nanoTime() - started);

    assertThat(took)
        .as(
            "close() of a loop that never ran, its consumer's close taking all it is given,"
                + " returns within twice the close timeout of %s",
            CLOSE_TIMEOUT)
        .isLessThan(CLOSE_TIMEOUT.multipliedBy(2).plus(CLOSE_GRACE));
  }

  /**
   * The handler in hand outlasts the close timeout as the loop stops: the loop stops without it,
   * and its record is given back. The stop took the whole close timeout and the record came again,
   * and the log did not say why.
   */
  @Test
  void aHandlerThatOutlastsTheCloseTimeoutIsNamedInAWarning() throws Exception {
    TestKafka.createTopics(1, topic);
    TestShareGroups.configure(group, Duration.ofSeconds(30), Duration.ofSeconds(1));
    CountDownLatch handlerStarted = new CountDownLatch(1);
    CountDownLatch handlerMayFinish = new CountDownLatch(1);
    DedupShareLoop<String, String> loop =
        builder(
                record -> {
                  handlerStarted.countDown();
                  handlerMayFinish.await();
                })
            .build();
    Future<?> running = threads.submit(loop);
    try {
      await().atMost(WAIT).until(() -> TestShareGroups.members(group) == 1);
      send("slow-1", "charge 8.00");
      assertThat(handlerStarted.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();

      threads.submit(loop::close).get(WAIT.toSeconds(), TimeUnit.SECONDS);
      running.get(WAIT.toSeconds(), TimeUnit.SECONDS);
    } finally {
      handlerMayFinish.countDown();
    }

    assertThat(warnings())
        .as("the log says which record's handler outlasted the close timeout, and what of it")
        .anySatisfy(
            message ->
                assertThat(message)
                    .contains(topic + "-0@0")
                    .contains(CLOSE_TIMEOUT.toString())
                    .contains("given back"));
  }

  private DedupShareLoop.Builder<String, String> builder(RecordHandler<String, String> handler) {
    IdempotentRecordHandler<String, String> records =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(LoopFixture.BIZ_TYPE)
            .key(KeyExtractors.header(LoopFixture.KEY_HEADER))
            .groupId(group)
            .handler(handler)
            .build();
    return DedupShareLoop.builder(TestShareGroups.consumerConfig(group), List.of(topic), records)
        .deadLetterHandler(KafkaDeadLetterPublisher.builder(dltProducer).groupId(group).build())
        .closeTimeout(CLOSE_TIMEOUT);
  }

  /**
   * A real share consumer whose close takes all the time it is given, as against a broker that does
   * not answer: without a timeout, the consumer's default.
   */
  private static ShareConsumer<String, String> closingAsLateAsAllowed(Map<String, Object> config) {
    return InterceptedShareConsumer.of(
        config,
        (method, args, call) -> {
          if (method.getName().equals("close")) {
            Duration allowed =
                args == null || args.length == 0 ? CONSUMER_DEFAULT_CLOSE : (Duration) args[0];
            Thread.sleep(allowed.toMillis());
          }
          return call.proceed();
        });
  }

  private List<String> warnings() {
    return loopLog.list.stream()
        .filter(event -> event.getLevel() == Level.WARN)
        .map(ILoggingEvent::getFormattedMessage)
        .toList();
  }

  private void send(String orderNo, String value) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, value);
    record.headers().add(LoopFixture.KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(record).get();
  }
}
