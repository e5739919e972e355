package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.DedupMode;
import io.consumerdedup.spring.autoconfigure.ConsumerDedupAutoConfiguration;
import io.consumerdedup.testing.TestDatabase;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import kotlin.coroutines.Continuation;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.support.KafkaHeaders;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.messaging.handler.annotation.SendTo;

/**
 * Listener shapes that {@code @Idempotent} cannot protect stop the application at start-up, naming
 * the method and saying what to do instead, rather than deduplicating nothing or losing records.
 */
class ListenerShapeRefusalTest {
  private static String schema;

  @BeforeAll
  static void setUp() {
    schema = TestDatabase.newSchema("spring_refusal");
  }

  @AfterAll
  static void tearDown() {
    TestDatabase.dropSchema(schema);
  }

  static List<Arguments> refused() {
    return List.of(
        Arguments.of(
            FinalMethod.class,
            "FinalMethod#charge",
            "Make it a non-final, non-private instance method"),
        Arguments.of(
            SuspendFunction.class,
            "SuspendFunction#charge",
            "Kotlin suspend functions are not supported"),
        Arguments.of(
            BatchOfPayloads.class,
            "BatchOfPayloads#charge",
            "Take List<ConsumerRecord<K, V>> or List<Message<?>>"),
        // Read as a record listener before, it started, and each batch was held at run time.
        Arguments.of(
            BatchOfPayloadsByPlaceholder.class,
            "BatchOfPayloadsByPlaceholder#charge",
            "Take List<ConsumerRecord<K, V>> or List<Message<?>>"),
        Arguments.of(
            BatchWithHeaderList.class,
            "BatchWithHeaderList#charge",
            "cannot be filtered together with the records"),
        Arguments.of(AsyncBatch.class, "AsyncBatch#charge", "Return void, not a future or Mono"),
        Arguments.of(
            TransactionalBatch.class,
            "TransactionalBatch#charge",
            "mode TRANSACTIONAL is not supported for batch listeners"),
        Arguments.of(
            RequestReply.class, "RequestReply#charge", "a duplicate request would get no reply"));
  }

  @ParameterizedTest(name = "{1}")
  @MethodSource("refused")
  void startupFailsNamingTheMethodAndTheRemedy(Class<?> listener, String method, String remedy) {
    new ApplicationContextRunner()
        .withConfiguration(
            AutoConfigurations.of(
                DataSourceAutoConfiguration.class, ConsumerDedupAutoConfiguration.class))
        .withPropertyValues(
            "spring.datasource.url=" + TestDatabase.url(schema), "orders.batch-listener=true")
        .withBean(listener)
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining("@Idempotent on")
                    .hasMessageContaining(method)
                    .hasMessageContaining(remedy));
  }

  static class FinalMethod {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(topics = "t")
    public final void charge(ConsumerRecord<String, String> record) {}
  }

  static class SuspendFunction {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(topics = "t")
    public Object charge(String payload, Continuation<? super Void> continuation) {
      return null;
    }
  }

  static class BatchOfPayloads {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(topics = "t", batch = "true")
    public void charge(List<String> payloads) {}
  }

  static class BatchOfPayloadsByPlaceholder {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(topics = "t", batch = "${orders.batch-listener}")
    public void charge(List<String> payloads) {}
  }

  static class BatchWithHeaderList {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(topics = "t", batch = "true")
    public void charge(
        List<ConsumerRecord<String, String>> records,
        @Header(KafkaHeaders.OFFSET) List<Long> offsets) {}
  }

  static class AsyncBatch {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(topics = "t", batch = "true")
    public CompletableFuture<Void> charge(List<ConsumerRecord<String, String>> records) {
      return CompletableFuture.completedFuture(null);
    }
  }

  static class TransactionalBatch {
    @Idempotent(bizType = "payment", header = "order-no", mode = DedupMode.TRANSACTIONAL)
    @KafkaListener(topics = "t", batch = "true")
    public void charge(List<ConsumerRecord<String, String>> records) {}
  }

  static class RequestReply {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(topics = "t")
    @SendTo("replies")
    public String charge(String request) {
      return "charged";
    }
  }
}
