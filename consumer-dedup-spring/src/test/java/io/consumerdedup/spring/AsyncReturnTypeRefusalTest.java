package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.spring.autoconfigure.ConsumerDedupAutoConfiguration;
import io.consumerdedup.testing.TestDatabase;
import java.util.List;
import java.util.concurrent.Future;
import java.util.concurrent.FutureTask;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.kafka.annotation.KafkaListener;
import reactor.core.publisher.Flux;

/**
 * A listener returning asynchronous work that spring-kafka neither waits for nor subscribes to: a
 * {@code Flux} (spring-kafka subscribes to a {@code Mono} only, and drops any other return value
 * with a DEBUG line when there is no reply topic), or a {@code Future} that is no {@code
 * CompletionStage}. The call returned at once, so consumer-dedup recorded SUCCESS for work that
 * never ran (a cold {@code Flux}) or whose failure nobody saw; every later delivery of the key, a
 * replay after the listener was fixed included, was skipped as a duplicate. Now the application
 * stops at start-up, naming the method and what to return instead.
 */
class AsyncReturnTypeRefusalTest {
  private static String schema;

  @BeforeAll
  static void setUp() {
    schema = TestDatabase.newSchema("spring_async_refusal");
  }

  @AfterAll
  static void tearDown() {
    TestDatabase.dropSchema(schema);
  }

  static List<Arguments> refused() {
    return List.of(
        Arguments.of(
            FluxListener.class,
            "FluxListener#charge",
            "spring-kafka subscribes to no reactor.core.publisher.Flux"),
        Arguments.of(
            FutureListener.class,
            "FutureListener#charge",
            "spring-kafka does not wait for a java.util.concurrent.Future"));
  }

  @ParameterizedTest(name = "{1}")
  @MethodSource("refused")
  void startupFailsNamingTheMethodAndWhatToReturn(Class<?> listener, String method, String why) {
    new ApplicationContextRunner()
        .withConfiguration(
            AutoConfigurations.of(
                DataSourceAutoConfiguration.class, ConsumerDedupAutoConfiguration.class))
        .withPropertyValues("spring.datasource.url=" + TestDatabase.url(schema))
        .withBean(listener)
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining("@Idempotent on")
                    .hasMessageContaining(method)
                    .hasMessageContaining(why)
                    .hasMessageContaining("Return a Mono or a CompletableFuture"));
  }

  static class FluxListener {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(topics = "t")
    public Flux<Void> charge(String payload) {
      return Flux.empty();
    }
  }

  static class FutureListener {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(topics = "t")
    public Future<Void> charge(String payload) {
      return new FutureTask<>(() -> null);
    }
  }
}
