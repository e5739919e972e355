package io.consumerdedup.test.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.test.RedeliveryReport;
import io.consumerdedup.testing.TestDatabase;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * {@link RedeliverEachRecord} around listeners that wipe the bytes they were handed once they are
 * done with them (card data, say), fingerprinted by those bytes: Kafka redelivers a record as new
 * bytes, so in production the redelivery is a duplicate. The copy must be one too, not a payload
 * conflict that fails the user's test of a correct listener.
 */
@SpringBootTest(classes = RedeliverEachRecordFreshCopyTest.App.class)
@RedeliverEachRecord
@DirtiesContext
class RedeliverEachRecordFreshCopyTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String BYTES = "org.apache.kafka.common.serialization.ByteArrayDeserializer";
  static String schema;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    schema =
        BootTestEnvironment.register(
            registry, "redeliver_fresh", "rft-cards", "rft-card-records", "rft-card-batches");
  }

  @AfterAll
  static void dropSchema() {
    TestDatabase.dropSchema(schema);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired RedeliveryReport redelivery;
  @Autowired Listeners listeners;

  @BeforeEach
  void freshReport() {
    redelivery.reset();
  }

  @Test
  void aListenerThatWipesItsPayloadBytesPassesAsItsRealRedeliveryWouldBeADuplicate()
      throws Exception {
    send("rft-cards", "ORD-1", "4111 1111 1111 1111");

    assertChargedOnceWithItsCopyADuplicate("ORD-1");
  }

  @Test
  void aListenerThatWipesItsRecordsValueBytesPassesAsItsRealRedeliveryWouldBeADuplicate()
      throws Exception {
    send("rft-card-records", "ORD-2", "4111 1111 1111 1111");

    assertChargedOnceWithItsCopyADuplicate("ORD-2");
  }

  @Test
  void aBatchListenerThatWipesItsRecordsValueBytesPassesAsItsRealRedeliveryWouldBeADuplicate()
      throws Exception {
    send("rft-card-batches", "ORD-3", "4111 1111 1111 1111");

    assertChargedOnceWithItsCopyADuplicate("ORD-3");
  }

  /**
   * The copy {@link RedeliverEachRecord} made of the card's record came as its real redelivery
   * would: a duplicate, which neither charged again nor failed.
   */
  private void assertChargedOnceWithItsCopyADuplicate(String orderNo) {
    await().atMost(WAIT).until(() -> redelivery.redeliveredCopies() == 1);
    assertThat(listeners.charged()).as("the card was charged").containsOnlyOnce(orderNo);
    assertThat(redelivery.failedRedeliveries()).as("the copy's failures").isEmpty();
    assertThat(redelivery.bodyRuns()).isEqualTo(1);
    redelivery.assertNoBodyRanTwice();
  }

  private void send(String topic, String orderNo, String card) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, orderNo, card);
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    template.send(record).get();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners() {
      return new Listeners();
    }
  }

  /** Read through the methods: the bean is a proxy, whose own fields are empty. */
  static class Listeners {
    private final List<String> charged = new CopyOnWriteArrayList<>();

    public List<String> charged() {
      return charged;
    }

    @Idempotent(bizType = "card", header = "order-no", fingerprint = "#payload")
    @KafkaListener(
        id = "rft-cards",
        topics = "rft-cards",
        properties = "value.deserializer=" + BYTES)
    public void charge(byte[] card, @Header("order-no") String orderNo) {
      charged.add(orderNo);
      Arrays.fill(card, (byte) 0);
    }

    @Idempotent(bizType = "card-record", header = "order-no", fingerprint = "#payload")
    @KafkaListener(
        id = "rft-card-records",
        topics = "rft-card-records",
        properties = "value.deserializer=" + BYTES)
    public void chargeRecord(ConsumerRecord<String, byte[]> record) {
      charged.add(record.key());
      Arrays.fill(record.value(), (byte) 0);
    }

    @Idempotent(bizType = "card-batch", header = "order-no", fingerprint = "#payload")
    @KafkaListener(
        id = "rft-card-batches",
        topics = "rft-card-batches",
        batch = "true",
        properties = "value.deserializer=" + BYTES)
    public void chargeBatch(List<ConsumerRecord<String, byte[]>> records) {
      for (ConsumerRecord<String, byte[]> record : records) {
        charged.add(record.key());
        Arrays.fill(record.value(), (byte) 0);
      }
    }
  }
}
