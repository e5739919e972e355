package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.spring.autoconfigure.DedupListenerContainersConfigurer;
import io.consumerdedup.testing.TestShareGroups;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.DefaultShareConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.core.ShareConsumerFactory;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * The application's stop closes consumer-dedup's share listener while the container's consumer
 * thread hands it a record it has already let through (the listener not closed yet when it looked)
 * and before it made the consumer's keeper. The close found no keeper to stop, and the keeper made
 * just after took the record: the listener ran after the stop, and the keeper's and worker's
 * threads lived on. The consumer is held there by the application's own consumer factory: its
 * {@code acquisitionLockTimeoutMs()}, which the listener asks in between, waits while the stop
 * runs. Spring Boot 4.0 refuses share listeners, so the boot40 module leaves this class out.
 */
@SpringBootTest(classes = ShareListenerCloseDuringDeliveryTest.App.class)
@DirtiesContext
class ShareListenerCloseDuringDeliveryTest {
  static final String TOPIC = "share-close-delivery";

  static final AtomicBoolean holdNextLockQuery = new AtomicBoolean();
  static final CountDownLatch held = new CountDownLatch(1);
  static final CountDownLatch stopped = new CountDownLatch(1);
  static final AtomicInteger calls = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_close_delivery", TOPIC);
    TestShareGroups.configure(TOPIC, Duration.ofSeconds(5));
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupListenerContainersConfigurer configurer;

  /** The user sees the listener not run once its stop returned, and none of its threads left. */
  @Test
  void aRecordHandedOverAsTheListenerClosesIsNotHandledAndLeavesNoThread() throws Exception {
    holdNextLockQuery.set(true);
    send(template, TOPIC, "charge 1.00", "order-no", "L-1");
    assertThat(held.await(ShareListenerIntegrationTest.WAIT.toSeconds(), TimeUnit.SECONDS))
        .as("the consumer thread hands the record over")
        .isTrue();

    // What the application's stop does once the containers stopped; this container still runs,
    // its consumer thread in the middle of handing the record over.
    configurer.stop();
    stopped.countDown();

    Thread.sleep(3_000); // the record would be handled by now
    assertThat(calls.get()).as("listener runs after the stop").isZero();
    assertThat(threads())
        .as("keeper and worker threads of the share listener alive after its stop")
        .isEmpty();
  }

  private static List<String> threads() {
    return Thread.getAllStackTraces().keySet().stream()
        .filter(Thread::isAlive)
        .map(Thread::getName)
        .filter(name -> name.startsWith("dedup-share-" + TOPIC + "-"))
        .toList();
  }

  /**
   * {@code consumer}, whose lock query waits for the stop once {@link #holdNextLockQuery} is set.
   */
  @SuppressWarnings("unchecked")
  static ShareConsumer<String, String> holding(ShareConsumer<String, String> consumer) {
    return (ShareConsumer<String, String>)
        Proxy.newProxyInstance(
            ShareConsumer.class.getClassLoader(),
            new Class<?>[] {ShareConsumer.class},
            (proxy, method, args) -> {
              if (method.getName().equals("acquisitionLockTimeoutMs")
                  && holdNextLockQuery.getAndSet(false)) {
                held.countDown();
                stopped.await(ShareListenerIntegrationTest.WAIT.toSeconds(), TimeUnit.SECONDS);
              }
              try {
                return method.invoke(consumer, args);
              } catch (InvocationTargetException e) {
                throw e.getCause();
              }
            });
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      DefaultShareConsumerFactory<String, String> consumers =
          new DefaultShareConsumerFactory<>(TestShareGroups.consumerConfig(TOPIC));
      return new ShareKafkaListenerContainerFactory<>(
          new ShareConsumerFactory<String, String>() {
            @Override
            public ShareConsumer<String, String> createShareConsumer(
                @Nullable String groupId, @Nullable String clientId) {
              return holding(consumers.createShareConsumer(groupId, clientId));
            }

            @Override
            public ShareConsumer<String, String> createShareConsumer(
                @Nullable String groupId,
                @Nullable String clientId,
                Map<String, Object> overrides) {
              return holding(consumers.createShareConsumer(groupId, clientId, overrides));
            }

            @Override
            public Map<String, Object> getConfigurationProperties() {
              return consumers.getConfigurationProperties();
            }
          });
    }

    @Bean
    Listener listener() {
      return new Listener();
    }
  }

  static class Listener {
    @Idempotent(bizType = "close-delivery", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void charge(ConsumerRecord<String, String> record) {
      calls.incrementAndGet();
    }
  }
}
