package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.KEY_HEADER;
import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.test.KafkaClusterTestKit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The broker stops answering while a poll loop stops: its last commit and its consumer's close wait
 * for a broker that does not answer. The broker is one of this test's own; the shared in-JVM broker
 * of the other tests is left alone.
 */
class DedupPollLoopUnansweredCloseTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_unanswered");

  private static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(3);
  private static final Duration WAIT = Duration.ofSeconds(60);

  private final ExecutorService threads = Executors.newCachedThreadPool();
  private KafkaClusterTestKit broker;
  private IdempotentExecutor executor;

  @AfterEach
  void stop() {
    threads.shutdownNow();
    if (executor != null) {
      executor.close();
    }
    if (broker != null) {
      TestKafka.closeUnanswering(broker);
    }
  }

  /**
   * {@link DedupPollLoop#close()} is called while the handler runs, the broker no longer answering;
   * the handler then finishes. The loop's last commit waited for the consumer's default API timeout
   * (60 s), and the commit of the consumer's close (its rebalance listener) and the close itself
   * for longer still, while {@code close()} gave up after the close timeout and returned with the
   * consumer open: the application went on to close its executor and DataSource, or the process
   * exited, under a loop still stopping. Now the last commit and the consumer's close are bounded
   * by the close timeout, and {@code close()} returns with the consumer closed.
   */
  @Test
  void closeReturnsWithTheConsumerClosedThoughTheBrokerNoLongerAnswers() throws Exception {
    broker = TestKafka.startOwn();
    String bootstrap = broker.bootstrapServers();
    send(bootstrap, "close-1");
    CountDownLatch handlerStarted = new CountDownLatch(1);
    CountDownLatch handlerMayFinish = new CountDownLatch(1);
    AtomicBoolean consumerClosed = new AtomicBoolean();
    executor = IdempotentExecutor.builder(fixture.store()).lease(Duration.ofMinutes(5)).build();
    IdempotentRecordHandler<String, String> handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(BIZ_TYPE)
            .key(KeyExtractors.header(KEY_HEADER))
            .handler(
                record -> {
                  handlerStarted.countDown();
                  handlerMayFinish.await();
                })
            .build();
    DedupPollLoop<String, String> loop =
        LoopFixture.quick(
                DedupPollLoop.builder(
                    tellingWhenClosed(consumerConfig(bootstrap), consumerClosed),
                    List.of(fixture.topic()),
                    handler))
            .deadLetterHandler((record, reason) -> {})
            .closeTimeout(CLOSE_TIMEOUT)
            .build();
    Future<?> running = threads.submit(loop);
    try {
      assertThat(handlerStarted.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();

      TestKafka.stopAnswering(broker);
      loop.stop();
      handlerMayFinish.countDown();
      long closeStarted = System.nanoTime();
      loop.close();
      Duration closeTook = Duration.ofNanos(System.nanoTime() - closeStarted);

      assertThat(consumerClosed)
          .as("the consumer closed when close() returned (after %s)", closeTook)
          .isTrue();
      running.get(WAIT.toSeconds(), TimeUnit.SECONDS);
      assertThat(fixture.store().find(DedupKey.of(BIZ_TYPE, "close-1")).map(DedupRecord::status))
          .as("the handler's outcome written though its offset could not be committed")
          .contains(DedupStatus.SUCCESS);
    } finally {
      handlerMayFinish.countDown();
    }
  }

  /** A real consumer that sets {@code closed} once a close of it has returned. */
  private static KafkaConsumer<String, String> tellingWhenClosed(
      Map<String, Object> config, AtomicBoolean closed) {
    return new KafkaConsumer<>(config) {
      @Override
      public void close() {
        try {
          super.close();
        } finally {
          closed.set(true);
        }
      }

      @Override
      public void close(Duration timeout) {
        try {
          super.close(timeout);
        } finally {
          closed.set(true);
        }
      }

      @Override
      public void close(CloseOptions options) {
        try {
          super.close(options);
        } finally {
          closed.set(true);
        }
      }
    };
  }

  private static Map<String, Object> consumerConfig(String bootstrap) {
    Map<String, Object> config = new HashMap<>(TestKafka.consumerConfig(fixture.group()));
    config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    return config;
  }

  private static void send(String bootstrap, String orderNo) throws Exception {
    Map<String, Object> config = new HashMap<>();
    config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    config.put(ProducerConfig.ACKS_CONFIG, "all");
    try (KafkaProducer<String, String> producer =
        new KafkaProducer<>(config, new StringSerializer(), new StringSerializer())) {
      ProducerRecord<String, String> record =
          new ProducerRecord<>(fixture.topic(), "charge " + orderNo);
      record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
      producer.send(record).get();
    }
  }
}
