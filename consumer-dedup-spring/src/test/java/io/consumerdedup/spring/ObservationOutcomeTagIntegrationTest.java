package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.micrometer.common.KeyValue;
import io.micrometer.observation.Observation;
import io.micrometer.observation.ObservationHandler;
import io.micrometer.observation.ObservationRegistry;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
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

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "spring_observation", "observed");
  }

  static final List<String> outcomes = new CopyOnWriteArrayList<>();

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void eachListenerObservationCarriesTheDedupOutcome() throws Exception {
    int from = outcomes.size();
    SpringTestEnvironment.send(template, "observed", "15.00", "order-no", "OBS-1");
    SpringTestEnvironment.send(template, "observed", "15.00", "order-no", "OBS-1");
    SpringTestEnvironment.send(template, "observed", "20.00", "order-no", "OBS-2");

    await().atMost(Duration.ofSeconds(30)).until(() -> outcomes.size() == from + 3);
    assertThat(outcomes.subList(from, from + 3))
        .containsExactly("processed", "duplicate", "processed");
    assertThat(SpringTestEnvironment.effects(jdbc, "observed", "OBS-1")).isEqualTo(1);
  }

  /**
   * The keys of a poll are claimed together while its first record is delivered; each record's
   * observation still carries its own outcome, not the last one the claim statement answered.
   */
  @Test
  void theRecordsOfOnePollEachCarryTheirOwnOutcome() throws Exception {
    SpringTestEnvironment.send(template, "observed", "15.00", "order-no", "OBS-10");
    await().atMost(Duration.ofSeconds(30)).until(() -> outcomes.contains("processed"));
    await()
        .atMost(Duration.ofSeconds(30))
        .until(() -> SpringTestEnvironment.effects(jdbc, "observed", "OBS-10") == 1);
    MessageListenerContainer container = containers.getListenerContainer("observed");
    container.pause();
    await().atMost(Duration.ofSeconds(30)).until(container::isContainerPaused);
    int from = outcomes.size();
    SpringTestEnvironment.send(template, "observed", "15.00", "order-no", "OBS-10");
    SpringTestEnvironment.send(template, "observed", "30.00", "order-no", "OBS-11");
    SpringTestEnvironment.send(template, "observed", "30.00", "order-no", "OBS-11");
    container.resume();

    await().atMost(Duration.ofSeconds(30)).until(() -> outcomes.size() == from + 3);
    assertThat(outcomes.subList(from, from + 3))
        .containsExactly("duplicate", "processed", "duplicate");
    assertThat(SpringTestEnvironment.effects(jdbc, "observed", "OBS-11")).isEqualTo(1);
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
                  if (outcome != null && context.getName().startsWith("spring.kafka.listener")) {
                    outcomes.add(outcome.getValue());
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
