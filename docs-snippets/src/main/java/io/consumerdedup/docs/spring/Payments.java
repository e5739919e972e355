package io.consumerdedup.docs.spring;

// tag::quick-start[]
import io.consumerdedup.spring.Idempotent;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.stereotype.Component;

@Component
class Payments {
  @Idempotent(bizType = "payment", header = "order-no")
  @KafkaListener(topics = "payments", groupId = "billing")
  void charge(String amount, @Header("order-no") String orderNo) {
    // applied once per order-no, however often Kafka delivers it
  }
}
// end::quick-start[]
