package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.StoreFixture;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
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
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.test.KafkaClusterTestKit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The broker stops answering while a share loop stops: its last acknowledgements and its consumer's
 * close wait for a broker that does not answer. The broker is one of this test's own; the shared
 * in-JVM broker of the other tests is left alone.
 */
class DedupShareLoopUnansweredCloseTest {
  @RegisterExtension static final StoreFixture fixture = new StoreFixture("share_close", 4);

  private static final String BIZ_TYPE = "payment";
  private static final String KEY_HEADER = "order-no";
  private static final String TOPIC = "payments";
  private static final String GROUP = "billing";
  private static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(3);
  private static final Duration WAIT = Duration.ofSeconds(60);

  private final ExecutorService threads = Executors.newCachedThreadPool();
  private KafkaClusterTestKit broker;
  private IdempotentExecutor executor;

  @AfterEach
  void stop() throws Exception {
    threads.shutdownNow();
    if (executor != null) {
      executor.close();
    }
    if (broker != null) {
      TestKafka.closeUnanswering(broker);
    }
  }

  /**
   * {@link DedupShareLoop#close()} is called while the handler runs, the broker no longer
   * answering; the handler then finishes. The loop's last commit waited for the consumer's default
   * API timeout (60 s) and its close for 30 s more, while {@code close()} gave up after twice the
   * close timeout and returned with the consumer still open: the application went on to close its
   * executor and DataSource under a loop still stopping. Now the loop bounds its stop, and {@code
   * close()} returns with the consumer closed.
   */
  @Test
  void closeReturnsWithTheConsumerClosedThoughTheBrokerNoLongerAnswers() throws Exception {
    broker = TestKafka.startOwn();
    String bootstrap = broker.bootstrapServers();
    TestShareGroups.createQueue(bootstrap, TOPIC, GROUP);
    send(bootstrap, "close-1", "charge 6.00");
    CountDownLatch handlerStarted = new CountDownLatch(1);
    CountDownLatch handlerMayFinish = new CountDownLatch(1);
    AtomicBoolean consumerClosed = new AtomicBoolean();
    executor = IdempotentExecutor.builder(fixture.store()).lease(Duration.ofMinutes(5)).build();
    IdempotentRecordHandler<String, String> handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(BIZ_TYPE)
            .key(KeyExtractors.header(KEY_HEADER))
            .groupId(GROUP)
            .handler(
                record -> {
                  handlerStarted.countDown();
                  handlerMayFinish.await();
                })
            .build();
    KafkaProducer<String, String> dltProducer = producer(bootstrap);
    DedupShareLoop<String, String> loop =
        DedupShareLoop.builder(consumerConfig(bootstrap), List.of(TOPIC), handler)
            .deadLetterHandler(KafkaDeadLetterPublisher.builder(dltProducer).groupId(GROUP).build())
            .closeTimeout(CLOSE_TIMEOUT)
            .build(config -> tellingWhenClosed(config, consumerClosed));
    AtomicReference<Thread> loopThread = new AtomicReference<>();
    Future<?> running =
        threads.submit(
            () -> {
              loopThread.set(Thread.currentThread());
              loop.run();
            });
    try {
      assertThat(handlerStarted.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();

      TestKafka.stopAnswering(broker);
      long closeStarted = System.nanoTime();
      Future<?> closing = threads.submit(loop::close);
      await()
          .atMost(WAIT)
          .alias("the loop waits for the handler in hand to stop")
          .until(() -> inStopSequence(loopThread.get()));
      handlerMayFinish.countDown();
      closing.get(WAIT.toSeconds(), TimeUnit.SECONDS);
      Duration closeTook = Duration.ofNanos(System.nanoTime() - closeStarted);

      assertThat(consumerClosed)
          .as("the consumer closed when close() returned (after %s)", closeTook)
          .isTrue();
      running.get(WAIT.toSeconds(), TimeUnit.SECONDS);
      assertThat(status("close-1"))
          .as("the handler's outcome written though its acknowledgement could not be sent")
          .contains(DedupStatus.SUCCESS);
    } finally {
      handlerMayFinish.countDown();
      dltProducer.close(Duration.ZERO);
    }
  }

  /** Whether the loop's thread waits for the handler in hand as the loop stops. */
  private static boolean inStopSequence(Thread loopThread) {
    return List.of(loopThread.getStackTrace()).stream()
        .anyMatch(frame -> frame.getMethodName().equals("finishInHand"));
  }

  /** A real share consumer that sets {@code closed} once its close has returned. */
  private static ShareConsumer<String, String> tellingWhenClosed(
      Map<String, Object> config, AtomicBoolean closed) {
    return InterceptedShareConsumer.of(
        config,
        (method, args, call) -> {
          try {
            return call.proceed();
          } finally {
            if (method.getName().equals("close")) {
              closed.set(true);
            }
          }
        });
  }

  private static Map<String, Object> consumerConfig(String bootstrap) {
    Map<String, Object> config = new HashMap<>();
    config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    config.put(ConsumerConfig.GROUP_ID_CONFIG, GROUP);
    config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    return config;
  }

  private static KafkaProducer<String, String> producer(String bootstrap) {
    Map<String, Object> config = new HashMap<>();
    config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    config.put(ProducerConfig.ACKS_CONFIG, "all");
    return new KafkaProducer<>(config, new StringSerializer(), new StringSerializer());
  }

  private static void send(String bootstrap, String orderNo, String value) throws Exception {
    try (KafkaProducer<String, String> producer = producer(bootstrap)) {
      ProducerRecord<String, String> record = new ProducerRecord<>(TOPIC, value);
      record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
      producer.send(record).get();
    }
  }

  private static java.util.Optional<DedupStatus> status(String orderNo) {
    return fixture.store().find(DedupKey.of(BIZ_TYPE, orderNo)).map(DedupRecord::status);
  }
}
