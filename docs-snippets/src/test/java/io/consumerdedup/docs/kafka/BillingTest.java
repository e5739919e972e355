package io.consumerdedup.docs.kafka;

import static io.consumerdedup.docs.DocsKafka.committed;
import static io.consumerdedup.docs.DocsKafka.header;
import static io.consumerdedup.docs.DocsKafka.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.docs.DocsDatabase;
import io.consumerdedup.docs.DocsKafka;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.kafka.KafkaDeadLetterPublisher;
import io.consumerdedup.testing.TestKafka;
import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;

/** The README's plain kafka-clients quick start, run as written against a broker and PostgreSQL. */
class BillingTest {
  private final ListAppender<ILoggingEvent> charges = new ListAppender<>();
  private DocsDatabase dataSource;

  @BeforeEach
  void setUp() throws Exception {
    dataSource = DocsDatabase.create("docs_billing");
    DocsKafka.startGroupAtEnd("billing", "payments");
    charges.start();
    ((Logger) LoggerFactory.getLogger(Billing.class)).addAppender(charges);
  }

  @AfterEach
  void tearDown() {
    ((Logger) LoggerFactory.getLogger(Billing.class)).detachAppender(charges);
    dataSource.close();
  }

  @Test
  void chargesEachOrderOnceAndDeadLettersARecordWithoutItsKey() throws Exception {
    TopicPartition deadLetterTopic =
        DocsKafka.ensureTopic("payments" + KafkaDeadLetterPublisher.DEFAULT_TOPIC_SUFFIX);
    int deadLettersBefore = (int) TestKafka.endOffset(deadLetterTopic);
    try (Billing billing = new Billing(TestKafka.bootstrapServers(), dataSource)) {
      send("payments", "25.00", "order-no", "QS-7001");
      send("payments", "25.00", "order-no", "QS-7001"); // delivered again, say a producer retry
      long last = send("payments", "9.99"); // no order-no header

      await()
          .atMost(Duration.ofSeconds(60))
          .until(() -> committed("billing", "payments") == last + 1);
    }

    assertThat(charges.list)
        .extracting(ILoggingEvent::getFormattedMessage)
        .containsExactly("Charging 25.00");
    DedupRecord record =
        JdbcDedupStore.builder(dataSource)
            .build()
            .find(DedupKey.of("payment", "QS-7001"))
            .orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    List<ConsumerRecord<String, String>> deadLetters =
        TestKafka.readFromStart(
            deadLetterTopic.topic(), deadLettersBefore + 1, Duration.ofSeconds(30));
    assertThat(deadLetters).hasSize(deadLettersBefore + 1);
    ConsumerRecord<String, String> deadLetter = deadLetters.get(deadLettersBefore);
    assertThat(deadLetter.value()).isEqualTo("9.99");
    assertThat(header(deadLetter, KafkaDeadLetterPublisher.EXCEPTION_CLASS_HEADER))
        .isEqualTo("io.consumerdedup.core.DedupKeyMissingException");
  }
}
