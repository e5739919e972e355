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
 * The container's consumer thread stalls past the acquisition lock (a long GC pause) right after it
 * sent a renewal, while a failing {@code @Idempotent} share listener runs on delivery 1: the
 * keeper, which renews from its own thread, forgets the record when the renewal does not come back
 * within a lock, and takes the renewed delivery 1 back as new when the stalled poll hands it over
 * at last. The worker had already run delivery 1 and decided it, and ran the listener on it a
 * second time. Spring Boot 4.0 refuses share listeners, so the boot40 module leaves this class out.
 */
@SpringBootTest(
    classes = ShareListenerLateRenewalTest.App.class,
    properties = "consumer-dedup.max-attempts=10")
@DirtiesContext
class ShareListenerLateRenewalTest {
  static final String TOPIC = "share-late-renewal";
  static final Duration LOCK = Duration.ofSeconds(1);

  /**
   * Longer than the lock and than the first run of the listener: the keeper forgets the record
   * after a lock, and the listener's first run ends before the stalled poll hands the record back.
   */
  static final Duration STALL = LOCK.multipliedBy(4);

  /** Longer than the keeper's wait for the renewal (a lock, a third more at most). */
  static final Duration FIRST_RUN = LOCK.multipliedBy(5).dividedBy(2);

  static final AtomicBoolean stalled = new AtomicBoolean();
  static final AtomicBoolean slept = new AtomicBoolean();
  static final List<Short> deliveries = new CopyOnWriteArrayList<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_share_late_renewal", TOPIC, TOPIC + "-dlt");
    TestShareGroups.configure(TOPIC, LOCK);
  }

  @Autowired KafkaTemplate<String, String> template;

  /**
   * The user sees the listener run once per delivery, the declined order in the dead-letter topic
   * once, and nothing left in the queue, although the consumer's thread stalled past the lock.
   */
  @Test
  void aDeliveryTakenBackAfterItsRenewalCameLateIsNotRunTwice() throws Exception {
    send(template, TOPIC, "charge 5.00", "order-no", "R-1");

    List<ConsumerRecord<String, String>> dead =
        readTopic(TOPIC + "-dlt", 1, Duration.ofSeconds(45));
    assertThat(stalled.get()).as("the consumer's thread stalled past the lock").isTrue();
    assertThat(dead).as("dead-lettered on its last delivery").hasSize(1);
    assertThat(header(dead.get(0), "order-no")).isEqualTo("R-1");
    assertThat(deliveries)
        .as("each delivery run once; delivery 1, taken back after its late renewal, not again")
        .containsExactly((short) 1, (short) 2, (short) 3, (short) 4, (short) 5);
    assertThat(readTopic(TOPIC + "-dlt", 2, Duration.ofSeconds(2))).hasSize(1);
    assertThat(TestShareGroups.remaining(TOPIC, TOPIC, Duration.ofSeconds(2))).isEmpty();
  }

  /**
   * Has the consumer's poll, the first time it hands back a renewed delivery, return only after
   * {@link #STALL}, as a stalled container thread would.
   */
  static ShareConsumer<String, String> stalling(ShareConsumer<String, String> consumer) {
    return ShareListenerTests.stallingOnce(consumer, delivery -> true, stalled, STALL);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.shareFactory(
          ShareListenerTests.consumerConfig(StringDeserializer.class, StringDeserializer.class),
          ShareListenerLateRenewalTest::stalling);
    }

    @Bean
    Listener listener() {
      return new Listener();
    }
  }

  static class Listener {
    @Idempotent(bizType = "late-renewal", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, groupId = TOPIC, containerFactory = "shareFactory")
    public void charge(ConsumerRecord<String, String> record) throws InterruptedException {
      short delivery = record.deliveryCount().orElse((short) 0);
      deliveries.add(delivery);
      // Once, on delivery 1: long enough for the keeper to renew its lock and to forget it.
      if (delivery == 1 && slept.compareAndSet(false, true)) {
        Thread.sleep(FIRST_RUN.toMillis());
      }
      throw new IllegalStateException("card declined for " + header(record, "order-no"));
    }
  }
}
