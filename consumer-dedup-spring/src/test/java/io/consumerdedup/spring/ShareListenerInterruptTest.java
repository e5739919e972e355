package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static java.util.concurrent.TimeUnit.SECONDS;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.testing.TestShareGroups;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.context.event.EventListener;
import org.springframework.core.task.support.TaskExecutorAdapter;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.event.ConsumerStoppedEvent;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * The application interrupts the consumer thread of a share container while its {@code Idempotent}
 * listener runs a record: the container runs on the application's executor, which is shut down with
 * {@code shutdownNow()}, as the container stops or on its own. spring-kafka ends the consumer's
 * loop on the interrupt and closes the consumer; consumer-dedup finishes the record in hand first,
 * within the close timeout. The interrupt cut that wait short: the consumer closed while the
 * handler still ran, and the record, applied a moment later, was given back to the queue
 * unacknowledged (a delivery spent). The consumer's close, interrupted in turn, threw: no {@code
 * ConsumerStoppedEvent}, and the consumer did not leave its group. Spring Boot 4.0 refuses share
 * listeners, so the boot40 module leaves this class out.
 */
@SpringBootTest(classes = ShareListenerInterruptTest.App.class)
@DirtiesContext
class ShareListenerInterruptTest {
  /** Interrupted as it polls. */
  static final String POLLING = "share-interrupt-polling";

  /** Stopped, then interrupted as it waits for the record in hand. */
  static final String STOPPING = "share-interrupt-stopping";

  /**
   * How long the handler goes on once the container's thread is interrupted: time enough for a
   * close that does not wait for it to give its record back first.
   */
  static final Duration HANDLER_AFTER_INTERRUPT = Duration.ofSeconds(2);

  /**
   * The groups' acquisition lock: outlasts the handler once interrupted, so that the record needs
   * no renewal as its consumer closes (ShareListenerStopPastLockTest has one that does).
   */
  static final Duration LOCK = Duration.ofSeconds(10);

  /** Where the stopping consumer's thread waits for the record in hand (package-private). */
  static final String FINISH_STEP_OWNER =
      "io.consumerdedup.spring.autoconfigure.DedupShareListener";

  /** Run each container's consumer thread, as an application's task executor would. */
  static final Map<String, ExecutorService> containerExecutors = new ConcurrentHashMap<>();

  static final Map<String, Thread> containerThreads = new ConcurrentHashMap<>();
  static final Map<String, CountDownLatch> started =
      Map.of(POLLING, new CountDownLatch(1), STOPPING, new CountDownLatch(1));
  static final Map<String, CountDownLatch> interrupted =
      Map.of(POLLING, new CountDownLatch(1), STOPPING, new CountDownLatch(1));
  static final Map<String, Long> endedNanos = new ConcurrentHashMap<>();
  static final Map<String, AtomicInteger> applied =
      Map.of(POLLING, new AtomicInteger(), STOPPING, new AtomicInteger());
  static final Map<String, List<ConsumerStoppedEvent>> stops = new ConcurrentHashMap<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_interrupt", POLLING, STOPPING);
    TestShareGroups.configure(POLLING, LOCK, Duration.ofSeconds(1)); // joins in a second
    TestShareGroups.configure(STOPPING, LOCK, Duration.ofSeconds(1)); // joins in a second
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry registry;

  /**
   * The user sees the order charged once, its SUCCESS recorded, and the record acknowledged: not
   * left in the queue for another delivery, although the consumer thread was interrupted while it
   * was charged.
   */
  @Test
  void aRecordInHandWhenTheContainerThreadIsInterruptedIsAcceptedOnceApplied() throws Exception {
    send(template, POLLING, "charge 7.00", "order-no", "I-1");
    awaitHandlerStarted(POLLING);

    long interruptNanos = System.nanoTime();
    containerExecutors.get(POLLING).shutdownNow();
    interrupted.get(POLLING).countDown();

    assertAcceptedOnceApplied(POLLING, "I-1", interruptNanos);
    assertThat(stops.getOrDefault(POLLING, List.of()))
        .as("[the container's consumer stopped, as its application is told] stop events")
        .hasSize(1);
  }

  /**
   * As above, the interrupt coming while the stopping container waits for the record in hand (the
   * application shuts the container's executor down with {@code shutdownNow()} as it stops).
   */
  @Test
  void aRecordInHandWhenTheStoppingContainerThreadIsInterruptedIsAcceptedOnceApplied()
      throws Exception {
    send(template, STOPPING, "charge 8.00", "order-no", "I-2");
    awaitHandlerStarted(STOPPING);

    MessageListenerContainer container = registry.getListenerContainer(STOPPING);
    Thread stop = new Thread(container::stop, "stopping " + STOPPING);
    stop.start();
    Thread consumerThread = containerThreads.get(STOPPING);
    await()
        .atMost(ShareListenerIntegrationTest.WAIT)
        .until(() -> waitsForTheRecordInHand(consumerThread));
    long interruptNanos = System.nanoTime();
    containerExecutors.get(STOPPING).shutdownNow();
    interrupted.get(STOPPING).countDown();

    assertAcceptedOnceApplied(STOPPING, "I-2", interruptNanos);
    stop.join(ShareListenerIntegrationTest.WAIT.toMillis());
    assertThat(stops.getOrDefault(STOPPING, List.of()))
        .as("[the container's consumer stopped, as its application is told] stop events")
        .hasSize(1);
  }

  private static void awaitHandlerStarted(String topic) throws InterruptedException {
    assertThat(started.get(topic).await(ShareListenerIntegrationTest.WAIT.toSeconds(), SECONDS))
        .as("the handler started")
        .isTrue();
  }

  /**
   * Whether {@code thread} waits for the handler in hand, as its consumer closes: the listener's
   * finish step, which keeps the locks renewed meanwhile, is on its stack.
   */
  private static boolean waitsForTheRecordInHand(Thread thread) {
    return Arrays.stream(thread.getStackTrace())
        .anyMatch(
            frame ->
                frame.getClassName().startsWith(FINISH_STEP_OWNER)
                    && frame.getMethodName().equals("finish"));
  }

  private void assertAcceptedOnceApplied(String topic, String orderNo, long interruptNanos)
      throws InterruptedException {
    assertThat(
            containerExecutors
                .get(topic)
                .awaitTermination(ShareListenerIntegrationTest.WAIT.toSeconds(), SECONDS))
        .as("the container's consumer thread ended after the interrupt")
        .isTrue();
    DedupKey key = DedupKey.of(topic, orderNo);
    await()
        .atMost(ShareListenerIntegrationTest.WAIT)
        .until(() -> store.find(key).map(r -> r.status() == DedupStatus.SUCCESS).orElse(false));
    assertThat(endedNanos.get(topic) - interruptNanos)
        .as("the handler was still running when the container's thread was interrupted")
        .isPositive();
    // A record given back is acquirable at once; one left locked, once its lock ran out.
    List<ConsumerRecord<String, String>> left =
        TestShareGroups.remaining(topic, topic, LOCK.plusSeconds(4));
    assertThat(left)
        .as("[records of %s left in the queue though its charge was applied] deliveries", orderNo)
        .extracting(record -> record.deliveryCount().orElse((short) 0))
        .isEmpty();
    assertThat(applied.get(topic).get()).as("charges of %s", orderNo).isEqualTo(1);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> pollingFactory() {
      return onOwnExecutor(POLLING);
    }

    @Bean
    ShareKafkaListenerContainerFactory<String, String> stoppingFactory() {
      return onOwnExecutor(STOPPING);
    }

    private static ShareKafkaListenerContainerFactory<String, String> onOwnExecutor(String topic) {
      ExecutorService executor =
          Executors.newCachedThreadPool(
              task -> {
                Thread thread = new Thread(task, topic + "-consumer");
                containerThreads.put(topic, thread);
                return thread;
              });
      containerExecutors.put(topic, executor);
      ShareKafkaListenerContainerFactory<String, String> factory =
          ShareListenerTests.stringShareFactory();
      factory.getContainerProperties().setListenerTaskExecutor(new TaskExecutorAdapter(executor));
      return factory;
    }

    @Bean
    Listener listener() {
      return new Listener();
    }

    @EventListener
    void stopped(ConsumerStoppedEvent event) {
      stops
          .computeIfAbsent(
              event.getSource(MessageListenerContainer.class).getListenerId(),
              id -> new CopyOnWriteArrayList<>())
          .add(event);
    }
  }

  static class Listener {
    @Idempotent(bizType = POLLING, header = "order-no")
    @KafkaListener(
        id = POLLING,
        topics = POLLING,
        groupId = POLLING,
        containerFactory = "pollingFactory")
    public void chargeInterruptedPolling(ConsumerRecord<String, String> record)
        throws InterruptedException {
      charge(POLLING);
    }

    @Idempotent(bizType = STOPPING, header = "order-no")
    @KafkaListener(
        id = STOPPING,
        topics = STOPPING,
        groupId = STOPPING,
        containerFactory = "stoppingFactory")
    public void chargeInterruptedStopping(ConsumerRecord<String, String> record)
        throws InterruptedException {
      charge(STOPPING);
    }

    private static void charge(String topic) throws InterruptedException {
      started.get(topic).countDown();
      try {
        interrupted.get(topic).await(ShareListenerIntegrationTest.WAIT.toSeconds(), SECONDS);
        Thread.sleep(HANDLER_AFTER_INTERRUPT.toMillis());
      } finally {
        endedNanos.put(topic, System.nanoTime());
      }
      applied.get(topic).incrementAndGet();
    }
  }
}
