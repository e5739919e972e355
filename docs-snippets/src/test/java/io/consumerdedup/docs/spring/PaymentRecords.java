package io.consumerdedup.docs.spring;

import java.nio.charset.StandardCharsets;
import org.apache.kafka.clients.producer.ProducerRecord;

/** The records the Spring snippets' tests send to the README's listener. */
final class PaymentRecords {
  private PaymentRecords() {}

  /** A payment of 25.00 on topic payments, with its order-no header. */
  static ProducerRecord<String, String> payment(String orderNo) {
    ProducerRecord<String, String> record = new ProducerRecord<>("payments", "25.00");
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    return record;
  }
}
