package io.consumerdedup.docs.spring.share;

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
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * docs/share-groups.md's Spring listener, as written, three consumers of one share group: an order
 * sent twice is charged once, and a record without its key is dead-lettered, nothing left in the
 * queue.
 */
@SpringBootTest(classes = ShareJobsTest.App.class)
class ShareJobsTest {
  private static final ListAppender<ILoggingEvent> charges = new ListAppender<>();
  private static final String DEAD_LETTERS =
      "payments" + KafkaDeadLetterPublisher.DEFAULT_TOPIC_SUFFIX;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) throws Exception {
    DocsKafka.ensureTopic("payments");
    DocsKafka.ensureTopic(DEAD_LETTERS);
    // The topic holds other tests' records: the share group starts at its end.
    TestShareGroups.configure("billing-queue", Duration.ofSeconds(15));
    TestShareGroups.startAtEnd("billing-queue", "payments");
    registry.add("spring.kafka.bootstrap-servers", TestKafka::bootstrapServers);
  }

  /** After the application started: Spring Boot's logging set-up drops appenders added before. */
  @BeforeEach
  void listen() {
    charges.start();
    ((Logger) LoggerFactory.getLogger(ShareJobs.class)).addAppender(charges);
  }

  @AfterEach
  void stopListening() {
    ((Logger) LoggerFactory.getLogger(ShareJobs.class)).detachAppender(charges);
  }

  @Test
  void anOrderSentTwiceIsChargedOnceAndARecordWithoutItsKeyIsDeadLettered() throws Exception {
    DocsKafka.send("payments", "31.00", "order-no", "SQ-9001");
    DocsKafka.send("payments", "31.00", "order-no", "SQ-9001"); // a producer retry, say
    DocsKafka.send("payments", "4.50"); // no order-no header

    await()
        .atMost(Duration.ofSeconds(60))
        .until(
            () ->
                TestKafka.readFromStart(DEAD_LETTERS, Integer.MAX_VALUE, Duration.ofSeconds(2))
                    .stream()
                    .anyMatch(deadLetter -> "4.50".equals(deadLetter.value())));
    await().atMost(Duration.ofSeconds(60)).until(() -> !charges.list.isEmpty());
    Thread.sleep(2000); // the copy, had it been applied too
    assertThat(charges.list)
        .extracting(ILoggingEvent::getFormattedMessage)
        .containsExactly("Charging 31.00");
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  @Import({ShareQueueConfiguration.class, ShareJobs.class})
  static class App {
    @Bean
    DocsDatabase dataSource() {
      return DocsDatabase.create("docs_spring_share");
    }
  }
}
