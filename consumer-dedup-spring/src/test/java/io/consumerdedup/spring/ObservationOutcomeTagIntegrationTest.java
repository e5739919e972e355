package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.micrometer.common.KeyValue;
import io.micrometer.observation.Observation;
import io.micrometer.observation.ObservationHandler;
import io.micrometer.observation.ObservationRegistry;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import org.awaitility.core.ConditionTimeoutException;
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
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.micrometer.KafkaRecordReceiverContext;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * With spring-kafka's listener observation on, each record's observation carries the dedup outcome
 * as the low-cardinality tag {@code consumer.dedup.outcome}, so a trace shows whether the listener
 * ran or the record was a duplicate.
 */
@SpringBootTest(
    classes = ObservationOutcomeTagIntegrationTest.App.class,
    properties = "spring.kafka.listener.observation-enabled=true")
@DirtiesContext
class ObservationOutcomeTagIntegrationTest {
  private static final Duration WAIT = Duration.ofSeconds(30);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_observation", "observed");
  }

  /**
   * The tag of each listener observation, by the record's offset: a record delivered again (after a
   * rebalance, say) replaces its entry instead of shifting every later one.
   */
  static final Map<Long, String> outcomes = new ConcurrentHashMap<>();

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void eachListenerObservationCarriesTheDedupOutcome() throws Exception {
    long first = send("15.00", "OBS-1");
    long second = send("15.00", "OBS-1");
    long third = send("20.00", "OBS-2");

    assertThat(outcomesOf(first, second, third))
        .containsExactly("processed", "duplicate", "processed");
    assertThat(SpringTestEnvironment.effects(jdbc, "observed", "OBS-1")).isEqualTo(1);
  }

  /**
   * The keys of a poll are claimed together while its first record is delivered; each record's
   * observation still carries its own outcome, not the last one the claim statement answered.
   */
  @Test
  void theRecordsOfOnePollEachCarryTheirOwnOutcome() throws Exception {
    long applied = send("15.00", "OBS-10");
    assertThat(outcomesOf(applied)).containsExactly("processed");
    // Sent while the container is stopped, so that its next consumer fetches them together: a
    // paused consumer may return a fetch it had on its way on its own first.
    MessageListenerContainer container = containers.getListenerContainer("observed");
    container.stop();
    long again = send("15.00", "OBS-10");
    long first = send("30.00", "OBS-11");
    long copy = send("30.00", "OBS-11");
    container.start();

    assertThat(outcomesOf(again, first, copy))
        .containsExactly("duplicate", "processed", "duplicate");
    assertThat(SpringTestEnvironment.effects(jdbc, "observed", "OBS-11")).isEqualTo(1);
  }

  private long send(String amount, String orderNo) throws Exception {
    return SpringTestEnvironment.send(template, "observed", amount, "order-no", orderNo);
  }

  /** The outcome tags of the records at {@code offsets}, once each record's observation ended. */
  private static List<String> outcomesOf(long... offsets) {
    try {
      await().atMost(WAIT).until(() -> Arrays.stream(offsets).allMatch(outcomes::containsKey));
    } catch (ConditionTimeoutException e) {
      throw new AssertionError(
          "No observation ended for some of the records at "
              + Arrays.toString(offsets)
              + " within "
              + WAIT
              + "; the outcomes observed, by offset: "
              + new TreeMap<>(outcomes),
          e);
    }
    return Arrays.stream(offsets).mapToObj(outcomes::get).toList();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    /** Records the tag of every Kafka listener observation when it stops. */
    @Bean
    ObservationRegistry observationRegistry() {
      ObservationRegistry registry = ObservationRegistry.create();
      registry
          .observationConfig()
          .observationHandler(
              new ObservationHandler<Observation.Context>() {
                @Override
                public boolean supportsContext(Observation.Context context) {
                  return true;
                }

                @Override
                public void onStop(Observation.Context context) {
                  KeyValue outcome =
                      context.getLowCardinalityKeyValue(ObservationOutcomeTagger.KEY);
                  if (outcome != null && context instanceof KafkaRecordReceiverContext received) {
                    outcomes.put(received.getRecord().offset(), outcome.getValue());
                  }
                }
              });
      return registry;
    }

    @Bean
    Charges charges(JdbcTemplate jdbc) {
      return new Charges(jdbc);
    }
  }

  static class Charges {
    final JdbcTemplate jdbc;

    Charges(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(id = "observed", topics = "observed")
    public void charge(String amount, @Header("order-no") String orderNo) {
      SpringTestEnvironment.effect(jdbc, "observed", orderNo, amount);
    }
  }
}
