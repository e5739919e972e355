package io.consumerdedup.docs.spring;

// The error handler of docs/spring-boot.md. Its first interval is a property, so that
// DeadLetterWiringTest can shorten the waits and keep the wiring.
// tag::error-handler[]
import java.time.Duration;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DeadLetterPublishingRecoverer;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.support.ExponentialBackOffWithMaxRetries;

@Configuration
public class ErrorHandling {
  @Bean
  DefaultErrorHandler errorHandler(
      KafkaTemplate<Object, Object> template,
      @Value("${billing.retry.initial-interval:1s}") Duration initialInterval) {
    var deadLetters = new DeadLetterPublishingRecoverer(template); // to <topic>-dlt
    var backOff = new ExponentialBackOffWithMaxRetries(4); // 5 attempts in all, then deadLetters
    backOff.setInitialInterval(initialInterval.toMillis()); // 1 s, 2 s, 4 s, 8 s
    backOff.setMultiplier(2.0);
    return new DefaultErrorHandler(deadLetters, backOff);
  }
}
// end::error-handler[]
