package io.consumerdedup.examples.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.examples.ledger.EffectKind;
import io.consumerdedup.examples.ledger.Ledger;
import io.consumerdedup.examples.report.RunStats;
import io.consumerdedup.test.RedeliveryReport;
import io.consumerdedup.test.spring.RedeliverEachRecord;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import javax.sql.DataSource;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * The payment service of the demo under redelivery testing: every record reaches its listener
 * twice, and each order is still charged once. It runs on the in-JVM broker the demo's smoke test
 * shares (one per test JVM), whose topics and groups carry a run id, so "payments" and "billing"
 * are this class's own.
 */
@SpringBootTest(
    classes = SpringPaymentsApplication.class,
    properties = {
      "demo.topic=payments",
      "demo.group=billing",
      "spring.kafka.listener.ack-mode=manual",
      "spring.kafka.consumer.auto-offset-reset=earliest"
    })
@RedeliverEachRecord
@Import(SpringPaymentsRedeliveryTest.DemoStats.class)
// Stops the listener when the class ends, before the shared broker stops with the test run.
@DirtiesContext
class SpringPaymentsRedeliveryTest {

  @Autowired KafkaTemplate<String, String> kafka;
  @Autowired RedeliveryReport redelivery;
  @Autowired DataSource dataSource;

  @Test
  void eachOrderIsChargedOnceThoughEveryRecordArrivesTwice() throws Exception {
    send("A-7001");
    send("A-7002");

    await().atMost(Duration.ofSeconds(30)).until(() -> redelivery.redeliveredCopies() == 2);

    redelivery.assertNoBodyRanTwice();
    Ledger ledger = new Ledger(dataSource);
    assertThat(ledger.entries(EffectKind.CHARGE)).isEqualTo(2);
    assertThat(ledger.actionsApplied(EffectKind.CHARGE)).as("orders charged").isEqualTo(2);
  }

  private void send(String orderNo) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>("payments", "pay 25.00");
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    kafka.send(record).get();
  }

  // --- the demo's topic, and its database: the dedup table and ledger in a schema of their own ---

  private static String schema;

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) throws SQLException {
    // Two partitions, as @EmbeddedKafka gave this topic before.
    TestKafka.createTopics(2, "payments");
    registry.add("spring.kafka.bootstrap-servers", TestKafka::bootstrapServers);
    schema = TestDatabase.newSchema("payments_redelivery");
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute(Ledger.DDL);
    }
    registry.add("spring.datasource.url", () -> TestDatabase.url(schema));
  }

  @AfterAll
  static void dropSchema() {
    TestDatabase.dropSchema(schema);
  }

  /** The run counters the demo's listener reports to, and the account it charges. */
  static class DemoStats {
    @Bean
    RunStats demoStats(DataSource dataSource) throws SQLException {
      new Ledger(dataSource).open(EffectKind.CHARGE);
      return new RunStats();
    }
  }
}
