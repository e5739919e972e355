package io.consumerdedup.docs.testkit;

import static io.consumerdedup.docs.DocsKafka.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.docs.DocsDatabase;
import io.consumerdedup.docs.DocsKafka;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.kafka.DeadLetterHandler;
import io.consumerdedup.kafka.DedupPollLoop;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.KafkaDeadLetterPublisher;
import io.consumerdedup.kafka.KeyExtractors;
import io.consumerdedup.test.RedeliveryReport;
import io.consumerdedup.testing.TestKafka;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.awaitility.Awaitility;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** docs/testing.md: redelivery testing of a plain poll loop, run as written. */
class PlainRedeliveryTest {
  private final List<String> charged = new CopyOnWriteArrayList<>();
  private DocsDatabase dataSource;

  @BeforeEach
  void setUp() throws Exception {
    dataSource = DocsDatabase.create("docs_redelivery");
    DocsKafka.startGroupAtEnd("billing-redelivery", "payments");
    Awaitility.setDefaultTimeout(Duration.ofSeconds(60));
  }

  @AfterEach
  void tearDown() {
    Awaitility.reset();
    dataSource.close();
  }

  @Test
  void eachRecordIsChargedOnceThoughTheLoopDeliversItTwice() throws Exception {
    Map<String, Object> consumerConfig = TestKafka.consumerConfig("billing-redelivery");
    ExecutorService executorService = Executors.newSingleThreadExecutor();
    try (IdempotentExecutor executor =
            IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build()).build();
        KafkaProducer<String, String> dltProducer = TestKafka.producer()) {
      DeadLetterHandler<String, String> deadLetters =
          KafkaDeadLetterPublisher.builder(dltProducer).build();

      // tag::plain-redelivery[]
      RedeliveryReport redelivery = new RedeliveryReport();
      IdempotentRecordHandler<String, String> payments =
          IdempotentRecordHandler.<String, String>builder(executor)
              .bizType("payment")
              .key(KeyExtractors.header("order-no"))
              .handler(redelivery.countBodyRuns("payments", record -> charge(record)))
              .build();
      DedupPollLoop<String, String> loop =
          DedupPollLoop.builder(
                  consumerConfig, List.of("payments"), redelivery.redeliverEachRecord(payments))
              .deadLetterHandler(deadLetters)
              .build();
      executorService.submit(loop);

      // ... send records
      // end::plain-redelivery[]
      for (String orderNo : List.of("RD-1", "RD-2", "RD-3")) {
        send("payments", "25.00 for " + orderNo, "order-no", orderNo);
      }
      // tag::plain-redelivery[]
      await().until(() -> redelivery.redeliveredCopies() == 3);
      redelivery.assertNoBodyRanTwice();
      // end::plain-redelivery[]

      assertThat(charged).hasSize(3);
      loop.close();
    } finally {
      executorService.shutdown();
      assertThat(executorService.awaitTermination(30, TimeUnit.SECONDS)).isTrue();
    }
  }

  private void charge(ConsumerRecord<String, String> record) {
    charged.add(record.value());
  }
}
