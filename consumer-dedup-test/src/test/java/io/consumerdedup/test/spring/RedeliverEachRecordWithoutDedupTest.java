package io.consumerdedup.test.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.test.RedeliveryReport;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * With consumer-dedup turned off ({@code consumer-dedup.enabled=false}) the same listener runs
 * unprotected, and redelivery testing reports every record it processed twice.
 */
@SpringBootTest(
    classes = RedeliverEachRecordWithoutDedupTest.App.class,
    properties = "consumer-dedup.enabled=false")
@RedeliverEachRecord
@DirtiesContext
class RedeliverEachRecordWithoutDedupTest {

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    TestKafka.createTopics(1, "rt-unprotected");
    registry.add("spring.kafka.bootstrap-servers", TestKafka::bootstrapServers);
    registry.add("spring.kafka.consumer.auto-offset-reset", () -> "earliest");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired RedeliveryReport redelivery;

  @Test
  void aListenerWithoutDedupIsReportedForEveryRecord() throws Exception {
    for (String orderNo : new String[] {"ORD-1", "ORD-2"}) {
      ProducerRecord<String, String> record = new ProducerRecord<>("rt-unprotected", orderNo, "x");
      record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
      template.send(record).get();
    }

    await().atMost(Duration.ofSeconds(30)).until(() -> redelivery.redeliveredCopies() == 2);
    assertThat(redelivery.bodiesRunTwice())
        .extracting(RedeliveryReport.RecordRuns::record)
        .containsExactly("rt-unprotected-0@0", "rt-unprotected-0@1");
    assertThatThrownBy(redelivery::assertNoBodyRanTwice)
        .hasMessageContaining("2 records were processed twice")
        .hasMessageContaining("Listeners.charge ran its body 2 times");
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration(exclude = DataSourceAutoConfiguration.class)
  static class App {
    @Bean
    Listeners listeners() {
      return new Listeners();
    }
  }

  static class Listeners {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(id = "rt-unprotected", topics = "rt-unprotected")
    public void charge(ConsumerRecord<String, String> record) {
      // The side effect does not matter here: the report counts the runs.
    }
  }
}
