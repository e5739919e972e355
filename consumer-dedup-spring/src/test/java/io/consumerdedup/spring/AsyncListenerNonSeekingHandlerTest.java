package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.CommonLoggingErrorHandler;
import org.springframework.kafka.support.KafkaHeaders;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An {@code @Idempotent} listener returning a {@code CompletableFuture}, in the default ack mode,
 * with an application error handler that does not seek (spring-kafka's {@code
 * CommonLoggingErrorHandler}): the record after a failed one of the same poll is applied.
 * spring-kafka switches a container whose listener returns a future to out-of-order acknowledgments
 * whatever its configured ack mode, and waits for the acknowledgment of every record of the poll.
 */
@SpringBootTest(
    classes = AsyncListenerNonSeekingHandlerTest.App.class,
    properties = "spring.kafka.listener.auto-startup=false")
@DirtiesContext
class AsyncListenerNonSeekingHandlerTest {
  static final String TOPIC = "ansh-orders";
  static final Map<String, AtomicInteger> calls = new ConcurrentHashMap<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "async_nonseeking", TOPIC);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void theRecordAfterOneTheHandlerLoggedIsApplied() throws Exception {
    SpringTestEnvironment.send(template, TOPIC, "bad", "order-no", "N-1");
    long last = SpringTestEnvironment.send(template, TOPIC, "good", "order-no", "N-2");
    containers.getListenerContainer(TOPIC).start(); // both records in its first poll

    await()
        .atMost(Duration.ofSeconds(15))
        .until(() -> SpringTestEnvironment.committed(TOPIC, TOPIC, 0) > last);
    assertThat(calls.get("N-1")).as("calls of the failing record").hasValue(1);
    assertThat(calls.get("N-2")).as("calls of the record after it").hasValue(1);
  }

  static class Listener {
    @Idempotent(bizType = "ansh", header = "order-no")
    @KafkaListener(id = TOPIC, topics = TOPIC)
    public CompletableFuture<Void> onOrder(
        String payload, @Header("order-no") String orderNo, @Header(KafkaHeaders.OFFSET) long at) {
      calls.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      if (payload.equals("bad")) {
        throw new IllegalStateException("bad order " + orderNo + " at " + at);
      }
      return CompletableFuture.completedFuture(null);
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listener listener() {
      return new Listener();
    }

    @Bean
    CommonLoggingErrorHandler errorHandler() {
      return new CommonLoggingErrorHandler();
    }
  }
}
