package io.consumerdedup.docs.spring;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.spring.listener.IdempotentRecordInterceptor;
import org.springframework.kafka.listener.AbstractMessageListenerContainer;

/** A listener container built without @KafkaListener, made idempotent (docs/spring-boot.md). */
final class HandBuiltContainers {
  private HandBuiltContainers() {}

  static void protect(
      AbstractMessageListenerContainer<String, String> container, IdempotentExecutor executor) {
    // tag::decorate[]
    IdempotentRecordInterceptor.decorate(container, executor, "payment"); // key: header "dedup-key"
    // end::decorate[]
  }
}
