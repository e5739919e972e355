package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.testing.TestShareGroups;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * With {@code consumer-dedup.claims-per-poll=false} an {@code @Idempotent} share listener claims
 * each record's key on its own and writes its SUCCESS before the next, as before claims per batch:
 * the records waiting for the worker together are still each applied once and acknowledged. The
 * share properties that the other share tests leave at their defaults are set here too: {@code
 * consumer-dedup.share.delivery-count-limit}, with {@code max-attempts} at its default (10), and
 * {@code consumer-dedup.share.retry-backoff}.
 */
@SpringBootTest(
    classes = ShareListenerRecordByRecordTest.App.class,
    properties = {
      "consumer-dedup.claims-per-poll=false",
      "consumer-dedup.share.delivery-count-limit=3",
      "consumer-dedup.share.retry-backoff="
          + ShareListenerRecordByRecordTest.RETRY_BACKOFF_MS
          + "ms"
    })
@DirtiesContext
class ShareListenerRecordByRecordTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String ONE_BY_ONE = "share-one-by-one";
  static final String DECLINED = "share-declined";
  static final List<Short> declinedDeliveries = new CopyOnWriteArrayList<>();

  /** When each run of the declining listener began ({@link System#nanoTime()}). */
  static final List<Long> declinedRunNanos = new CopyOnWriteArrayList<>();

  /**
   * The retry back-off set: longer than the group's 5 s lock, which is renewed while the failed
   * record waits, so that the record is released after the back-off, not delivered again when its
   * lock runs out.
   */
  static final long RETRY_BACKOFF_MS = 6_000;

  static final CountDownLatch ENTERED = new CountDownLatch(1);
  static final CountDownLatch OPEN = new CountDownLatch(1);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    String schema =
        SpringTestEnvironment.prepare(
            registry, "spring_share_one_by_one", ONE_BY_ONE, DECLINED, DECLINED + "-dlt");
    SpringTestEnvironment.noteDedupTransactions(schema);
    TestShareGroups.configure(ONE_BY_ONE, Duration.ofSeconds(5));
    TestShareGroups.configure(DECLINED, Duration.ofSeconds(5));
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;

  @Test
  void eachRecordIsClaimedOnItsOwnAndAppliedOnce() throws Exception {
    int orders = 20;
    send(template, ONE_BY_ONE, "open the gate", "order-no", "gate");
    assertThat(ENTERED.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();
    for (int i = 0; i < orders; i++) {
      send(template, ONE_BY_ONE, "charge " + i, "order-no", "O-" + i);
    }
    Thread.sleep(2000);
    int claimsBefore = SpringTestEnvironment.transactions(jdbc, "one-by-one", "PROCESSING");
    OPEN.countDown();

    await()
        .atMost(WAIT)
        .until(() -> SpringTestEnvironment.effects(jdbc, ONE_BY_ONE, "O-" + (orders - 1)) == 1);
    await().atMost(WAIT).until(() -> TestShareGroups.lag(ONE_BY_ONE, ONE_BY_ONE) == 0);
    for (int i = 0; i < orders; i++) {
      assertThat(SpringTestEnvironment.effects(jdbc, ONE_BY_ONE, "O-" + i))
          .as("order O-%d charged", i)
          .isEqualTo(1);
    }
    int claims =
        SpringTestEnvironment.transactions(jdbc, "one-by-one", "PROCESSING") - claimsBefore;
    assertThat(claims).as("one claim transaction per record").isGreaterThanOrEqualTo(orders);
    assertThat(TestShareGroups.remaining(ONE_BY_ONE, ONE_BY_ONE, Duration.ofSeconds(2))).isEmpty();
  }

  /**
   * The application's delivery count limit set to 3, as on a cluster whose {@code
   * group.share.delivery.count.limit} is 3 (the test broker's stays 5, so a record released on its
   * third delivery would come a fourth time): the user sees a listener that always fails run three
   * times and its record dead-lettered once, then rejected. Before, the property did not exist and
   * the listener took 5 as the limit: on such a cluster the third failure was released and the
   * broker archived the record, without its dead letter. The retry back-off set to 6 s: each run
   * comes at least that long after the one before; before, the listener released a failed record
   * after 1 s, whatever was set.
   */
  @Test
  void aFailingRecordIsDeadLetteredOnTheLastDeliveryOfTheConfiguredLimit() throws Exception {
    send(template, DECLINED, "charge 3.00", "order-no", "D-1");

    List<ConsumerRecord<String, String>> dead = readTopic(DECLINED + "-dlt", 1, WAIT);
    assertThat(dead).as("dead letters").hasSize(1);
    assertThat(header(dead.get(0), "order-no")).isEqualTo("D-1");
    assertThat(declinedDeliveries)
        .as("listener runs, by delivery, when the dead letter was written")
        .containsExactly((short) 1, (short) 2, (short) 3);
    assertThat(TestShareGroups.remaining(DECLINED, DECLINED, Duration.ofSeconds(2)))
        .as("left in the queue: rejected, not released")
        .isEmpty();
    assertThat(declinedDeliveries).as("listener runs").hasSize(3);
    List<Long> gapsMs = new ArrayList<>();
    for (int i = 1; i < declinedRunNanos.size(); i++) {
      gapsMs.add((declinedRunNanos.get(i) - declinedRunNanos.get(i - 1)) / 1_000_000);
    }
    assertThat(gapsMs)
        .as("ms between a failed run and the next delivery's run")
        .hasSize(2)
        .allSatisfy(gap -> assertThat(gap).isGreaterThanOrEqualTo(RETRY_BACKOFF_MS));
    assertThat(readTopic(DECLINED + "-dlt", 2, Duration.ofSeconds(1)))
        .as("dead letters")
        .hasSize(1);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      return ShareListenerTests.stringShareFactory();
    }

    @Bean
    Listener listener(JdbcTemplate jdbc) {
      return new Listener(jdbc);
    }

    @Bean
    DecliningListener decliningListener() {
      return new DecliningListener();
    }
  }

  static class DecliningListener {
    @Idempotent(bizType = "declined", header = "order-no")
    @KafkaListener(
        id = DECLINED,
        topics = DECLINED,
        groupId = DECLINED,
        containerFactory = "shareFactory")
    public void charge(ConsumerRecord<String, String> record) {
      declinedRunNanos.add(System.nanoTime());
      declinedDeliveries.add(record.deliveryCount().orElse((short) 0));
      throw new IllegalStateException("card declined for " + header(record, "order-no"));
    }
  }

  static class Listener {
    private final JdbcTemplate jdbc;

    Listener(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "one-by-one", header = "order-no")
    @KafkaListener(
        id = ONE_BY_ONE,
        topics = ONE_BY_ONE,
        groupId = ONE_BY_ONE,
        containerFactory = "shareFactory")
    public void handle(ConsumerRecord<String, String> record) throws InterruptedException {
      String orderNo = header(record, "order-no");
      if (orderNo.equals("gate")) {
        ENTERED.countDown();
        if (!OPEN.await(WAIT.toSeconds(), TimeUnit.SECONDS)) {
          throw new IllegalStateException("the gate was never opened");
        }
      }
      SpringTestEnvironment.effect(jdbc, ONE_BY_ONE, orderNo, record.value());
    }
  }
}
