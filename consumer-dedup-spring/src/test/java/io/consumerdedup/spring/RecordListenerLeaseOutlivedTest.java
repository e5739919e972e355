package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.testing.TestDatabase;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.ConcurrentMessageListenerContainer;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A record listener at the Boot defaults (claims per poll, SUCCESS marks written in groups in the
 * background) whose handler outlives its lease: the database refuses the renewals of its claim, so
 * the lease runs out while the handler still runs, and a copy of the record (the provider's
 * repeated callback, on the other partition) is claimed again by another consumer thread of the
 * same process. Meanwhile the database refuses the key's SUCCESS, then takes it again. Two attempts
 * of one key in one process, with their outcomes on their way together: the end-to-end case of
 * {@code SupersededOutcomeTest}.
 */
@SpringBootTest(classes = RecordListenerLeaseOutlivedTest.App.class)
@DirtiesContext
class RecordListenerLeaseOutlivedTest {
  static final String TOPIC = "lease-outlived";
  static final String BIZ_TYPE = "outlived";
  static final DedupKey KEY = DedupKey.of(BIZ_TYPE, "ORD-1");
  static final Duration WAIT = Duration.ofSeconds(15);

  static String schema;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    schema = SpringTestEnvironment.prepare(registry, "outlived", s -> s, 2, TOPIC);
    SpringTestEnvironment.refuseListedSuccesses(schema);
    refuseListedRenewals(schema);
    registry.add("consumer-dedup.lease", () -> "2s");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired MeterRegistry meters;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void theStaleAttemptIsReportedLostAndNoOffsetPassesTheCurrentOneUntilItsSuccessIsWritten()
      throws Exception {
    ConcurrentMessageListenerContainer<?, ?> container =
        (ConcurrentMessageListenerContainer<?, ?>) containers.getListenerContainer(TOPIC);
    await()
        .atMost(Duration.ofSeconds(60))
        .until(
            () ->
                container.getContainers().size() == 2
                    && container.getContainers().stream()
                        .allMatch(
                            child ->
                                child.getAssignedPartitions() != null
                                    && child.getAssignedPartitions().size() == 1));
    SpringTestEnvironment.refuseSuccessOf(jdbc, KEY.bizKey());
    jdbc.update("INSERT INTO renewal_faults (biz_key, attempts) VALUES (?, 1)", KEY.bizKey());

    long firstOffset = send(0, "first");
    assertThat(Handlers.firstStarted.await(WAIT.toSeconds(), TimeUnit.SECONDS))
        .as("the first attempt's handler started")
        .isTrue();
    // Its renewals refused, the first attempt's lease runs out while its handler still runs.
    await()
        .atMost(WAIT)
        .until(
            () ->
                Boolean.TRUE.equals(
                    jdbc.queryForObject(
                        "SELECT lease_until < now() FROM consumer_dedup WHERE biz_key = ?",
                        Boolean.class,
                        KEY.bizKey())));

    long againOffset = send(1, "again");
    // The other consumer thread takes the key over and runs the handler: the re-run the design
    // allows once a lease has run out. Its SUCCESS is refused by the database and kept.
    await()
        .atMost(WAIT)
        .until(() -> SpringTestEnvironment.refusedSuccessesOf(jdbc, KEY.bizKey()) >= 1);
    assertThat(attempts()).as("the key taken over by the second attempt").isEqualTo(2);
    // The first handler ends now, its SUCCESS behind the current attempt's, which is kept.
    Handlers.releaseFirst.countDown();
    await().atMost(WAIT).until(() -> Handlers.returned.size() == 2);

    // While the database refuses the current attempt's SUCCESS: nothing passes its record.
    long until = System.nanoTime() + Duration.ofSeconds(3).toNanos();
    while (System.nanoTime() < until) {
      assertThat(SpringTestEnvironment.committed(TOPIC, TOPIC, 1))
          .as("the offset committed past the record whose current SUCCESS is not written")
          .isLessThanOrEqualTo(againOffset);
      assertThat(status())
          .as("the key's status while its SUCCESS is refused")
          .isEqualTo("PROCESSING");
      Thread.sleep(100);
    }
    assertThat(Heard.events)
        .as("what the listener heard of the key")
        .contains("lost 1")
        .doesNotContain("SUCCESS 1", "SUCCESS 2", "lost 2");

    // The database takes SUCCESS again: the current attempt's is written, and both records passed.
    jdbc.update("DELETE FROM mark_faults WHERE biz_key = ?", KEY.bizKey());
    await().atMost(WAIT).until(() -> "SUCCESS".equals(status()));
    assertThat(attempts()).as("SUCCESS of the current attempt").isEqualTo(2);
    await()
        .atMost(WAIT)
        .until(
            () ->
                SpringTestEnvironment.committed(TOPIC, TOPIC, 0) == firstOffset + 1
                    && SpringTestEnvironment.committed(TOPIC, TOPIC, 1) == againOffset + 1);

    assertThat(Heard.events)
        .as("what the listener heard of the key")
        .containsExactlyInAnyOrder("lost 1", "SUCCESS 2");
    assertThat(SpringTestEnvironment.outcomes(meters, BIZ_TYPE, "lease_lost"))
        .as("lease_lost outcomes counted")
        .isEqualTo(1);
    // Once for the first attempt, once for the takeover after its lease ran out; never a third.
    assertThat(SpringTestEnvironment.effects(jdbc, TOPIC, KEY.bizKey()))
        .as("effects applied for the key")
        .isEqualTo(2);
    assertThat(Handlers.returned).containsExactlyInAnyOrder("first", "again");
  }

  private long send(int partition, String value) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(TOPIC, partition, null, value);
    record.headers().add("order-no", KEY.bizKey().getBytes(StandardCharsets.UTF_8));
    return template.send(record).get().getRecordMetadata().offset();
  }

  private String status() {
    return jdbc.queryForObject(
        "SELECT status FROM consumer_dedup WHERE biz_key = ?", String.class, KEY.bizKey());
  }

  private Integer attempts() {
    return jdbc.queryForObject(
        "SELECT attempts FROM consumer_dedup WHERE biz_key = ?", Integer.class, KEY.bizKey());
  }

  /**
   * Has the database refuse, as a transient failure, the lease renewals of the attempts listed in
   * {@code renewal_faults}: as a database away for that key, for longer than the lease.
   */
  static void refuseListedRenewals(String schema) {
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE TABLE renewal_faults (biz_key text, attempts int)");
      statement.execute(
          "CREATE FUNCTION refuse_renewals() RETURNS trigger AS $$ BEGIN"
              + " IF OLD.status = 'PROCESSING' AND NEW.status = 'PROCESSING'"
              + " AND NEW.attempts = OLD.attempts AND EXISTS (SELECT 1 FROM renewal_faults f"
              + " WHERE f.biz_key = NEW.biz_key AND f.attempts = NEW.attempts) THEN"
              + " RAISE EXCEPTION 'injected: renewal of % refused', NEW.biz_key"
              + " USING ERRCODE = '40001'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql");
      statement.execute(
          "CREATE TRIGGER refuse_renewals BEFORE UPDATE ON consumer_dedup FOR EACH ROW"
              + " EXECUTE FUNCTION refuse_renewals()");
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
  }

  /** What the application's {@link DedupListener} heard of the key: outcome and attempt. */
  static final class Heard {
    static final List<String> events = new CopyOnWriteArrayList<>();
  }

  static final class Handlers {
    static final CountDownLatch firstStarted = new CountDownLatch(1);
    static final CountDownLatch releaseFirst = new CountDownLatch(1);
    static final List<String> returned = new CopyOnWriteArrayList<>();
  }

  static class Listener {
    final JdbcTemplate jdbc;

    Listener(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = BIZ_TYPE, header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC, concurrency = "2")
    public void charge(ConsumerRecord<String, String> record) throws InterruptedException {
      SpringTestEnvironment.effect(
          jdbc, record.topic(), SpringTestEnvironment.header(record, "order-no"), record.value());
      if (record.value().equals("first")) {
        Handlers.firstStarted.countDown();
        // Bounded, so that a failed test does not hang the container's stop.
        Handlers.releaseFirst.await(30, TimeUnit.SECONDS);
      }
      Handlers.returned.add(record.value());
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    SimpleMeterRegistry meterRegistry() {
      return new SimpleMeterRegistry();
    }

    @Bean
    DedupListener heard() {
      return new DedupListener() {
        @Override
        public void completed(DedupKey key, int attempt, Duration handlerTime) {
          if (key.equals(KEY)) {
            Heard.events.add("SUCCESS " + attempt);
          }
        }

        @Override
        public void leaseLost(DedupKey key, int attempt) {
          if (key.equals(KEY)) {
            Heard.events.add("lost " + attempt);
          }
        }
      };
    }

    @Bean
    Listener listener(JdbcTemplate jdbc) {
      return new Listener(jdbc);
    }
  }
}
