package io.consumerdedup.docs.spring;

// docs/testing.md's redelivery test, run as written on the README's quick-start listener: a
// package-private method, which the library protects (had it not, the body would run twice).
// tag::redelivery-test[]
import static org.awaitility.Awaitility.await;

import io.consumerdedup.test.RedeliveryReport;
import io.consumerdedup.test.spring.RedeliverEachRecord;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.test.context.EmbeddedKafka;

@SpringBootTest
@EmbeddedKafka(topics = "payments", bootstrapServersProperty = "spring.kafka.bootstrap-servers")
@RedeliverEachRecord
class PaymentsRedeliveryTest {
  @Autowired KafkaTemplate<String, String> kafka;
  @Autowired RedeliveryReport redelivery;

  @Test
  void eachOrderIsChargedOnceThoughEveryRecordArrivesTwice() throws Exception {
    kafka.send(payment("A-7001")).get();
    kafka.send(payment("A-7002")).get();

    await().atMost(Duration.ofSeconds(30)).until(() -> redelivery.redeliveredCopies() == 2);

    redelivery.assertNoBodyRanTwice();
  }

  private static ProducerRecord<String, String> payment(String orderNo) {
    ProducerRecord<String, String> record = new ProducerRecord<>("payments", "25.00");
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    return record;
  }
}
// end::redelivery-test[]
