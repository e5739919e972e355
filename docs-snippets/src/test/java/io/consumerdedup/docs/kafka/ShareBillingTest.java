package io.consumerdedup.docs.kafka;

import static io.consumerdedup.docs.DocsKafka.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.docs.DocsDatabase;
import io.consumerdedup.docs.DocsKafka;
import io.consumerdedup.kafka.KafkaDeadLetterPublisher;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;

/** docs/share-groups.md's program, two instances in one share group, as written. */
class ShareBillingTest {
  private final ListAppender<ILoggingEvent> charges = new ListAppender<>();
  private DocsDatabase dataSource;

  @BeforeEach
  void setUp() {
    dataSource = DocsDatabase.create("docs_share_billing");
    charges.start();
    ((Logger) LoggerFactory.getLogger(ShareBilling.class)).addAppender(charges);
  }

  @AfterEach
  void tearDown() {
    ((Logger) LoggerFactory.getLogger(ShareBilling.class)).detachAppender(charges);
    dataSource.close();
  }

  @Test
  void twoInstancesChargeEachOrderOnceAndDeadLetterARecordWithoutItsKey() throws Exception {
    DocsKafka.ensureTopic("payments");
    TopicPartition deadLetterTopic =
        DocsKafka.ensureTopic("payments" + KafkaDeadLetterPublisher.DEFAULT_TOPIC_SUFFIX);
    int deadLettersBefore = (int) TestKafka.endOffset(deadLetterTopic);
    // The topic holds other tests' records: the share group starts at its end.
    TestShareGroups.configure("billing-queue", Duration.ofSeconds(15));
    TestShareGroups.startAtEnd("billing-queue", "payments");
    try (ShareBilling first = new ShareBilling(TestKafka.bootstrapServers(), dataSource);
        ShareBilling second = new ShareBilling(TestKafka.bootstrapServers(), dataSource)) {
      send("payments", "25.00", "order-no", "QS-8001");
      send("payments", "25.00", "order-no", "QS-8001"); // delivered again, say a producer retry
      send("payments", "9.99"); // no order-no header
      await()
          .atMost(Duration.ofSeconds(60))
          .until(() -> TestKafka.endOffset(deadLetterTopic) == deadLettersBefore + 1);
      await().atMost(Duration.ofSeconds(60)).until(() -> !charges.list.isEmpty());
    }
    assertThat(TestShareGroups.remaining("billing-queue", "payments", Duration.ofSeconds(3)))
        .isEmpty();
    assertThat(charges.list)
        .extracting(ILoggingEvent::getFormattedMessage)
        .containsExactly("Charging 25.00");
    List<ConsumerRecord<String, String>> deadLetters =
        TestKafka.readFromStart(
            deadLetterTopic.topic(), deadLettersBefore + 1, Duration.ofSeconds(30));
    assertThat(deadLetters.get(deadLettersBefore).value()).isEqualTo("9.99");
  }
}
