package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.testing.TestShareGroups;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * The container's consumer thread stalls past the acquisition lock (a long GC pause) while a
 * failing {@code @Idempotent} share listener runs on delivery 4: the lock runs out and the broker
 * delivers the record again, to the same consumer, as delivery 5, the last of the broker's default
 * limit. Taken for the renewed delivery 4 coming back, it was never handed to the listener and got
 * the RELEASE decided for delivery 4, and the broker archived it: no dead letter, no further run.
 * Spring Boot 4.0 refuses share listeners, so the boot40 module leaves this class out.
 */
@SpringBootTest(
    classes = ShareListenerLostLockTest.App.class,
    properties = "consumer-dedup.max-attempts=10")
@DirtiesContext
class ShareListenerLostLockTest {
  static final String TOPIC = "share-lost-lock";
  static final Duration LOCK = Duration.ofSeconds(1);

  /** Longer than the lock: it runs out while the consumer's thread is stalled. */
  static final Duration STALL = LOCK.multipliedBy(3);

  static final AtomicBoolean stalled = new AtomicBoolean();
  static final AtomicBoolean slept = new AtomicBoolean();
  static final List<Short> deliveries = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_lost_lock", TOPIC, TOPIC + "-dlt");
    TestShareGroups.configure(TOPIC, LOCK, Duration.ofSeconds(1)); // joins in a second
  }

  @Autowired KafkaTemplate<String, String> template;

  /**
   * The user sees the declined order in the dead-letter topic, handled on its last delivery, and
   * nothing left in the queue, although the consumer's thread stalled past the lock.
   */
  @Test
  void aRecordWhoseLockRanOutDuringAStallIsDeadLetteredOnItsLastDeliveryNotArchived()
      throws Exception {
    send(template, TOPIC, "charge 5.00", "order-no", "L-1");

    List<ConsumerRecord<String, String>> dead =
        readTopic(TOPIC + "-dlt", 1, Duration.ofSeconds(45));
    assertThat(stalled.get()).as("the consumer's thread stalled past the lock").isTrue();
    assertThat(dead).as("dead-lettered on its last delivery, not archived unseen").hasSize(1);
    assertThat(header(dead.get(0), "order-no")).isEqualTo("L-1");
    assertThat(deliveries)
        .as("each delivery handled once; delivery 5, after the lock ran out, as one of its own")
        .containsExactly((short) 1, (short) 2, (short) 3, (short) 4, (short) 5);
    assertThat(TestShareGroups.remaining(TOPIC, TOPIC, Duration.ofSeconds(2))).isEmpty();
  }

  /**
   * Has the consumer's poll, the first time it hands back a renewed delivery 4, return only after
   * {@link #STALL}, as a stalled container thread would.
   */
  static ShareConsumer<String, String> stalling(ShareConsumer<String, String> consumer) {
    return ShareListenerTests.stallingOnce(consumer, delivery -> delivery == 4, stalled, STALL);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.shareFactory(
          ShareListenerTests.consumerConfig(StringDeserializer.class, StringDeserializer.class),
          ShareListenerLostLockTest::stalling);
    }

    @Bean
    Listener listener() {
      return new Listener();
    }
  }

  static class Listener {
    @Idempotent(bizType = "lost-lock", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void charge(ConsumerRecord<String, String> record) throws InterruptedException {
      short delivery = record.deliveryCount().orElse((short) 0);
      deliveries.add(delivery);
      // Once, on delivery 4: long enough for the keeper to renew its lock and the stall to follow.
      if (delivery == 4 && slept.compareAndSet(false, true)) {
        Thread.sleep(LOCK.multipliedBy(5).toMillis());
      }
      throw new IllegalStateException("card declined for " + header(record, "order-no"));
    }
  }
}
