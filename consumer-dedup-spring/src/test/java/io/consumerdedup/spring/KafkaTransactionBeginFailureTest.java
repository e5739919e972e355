package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.testing.TestDatabase;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.test.KafkaClusterTestKit;
import org.apache.kafka.common.test.TestKitNodes;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * Kafka transactions ({@code transaction-id-prefix} set) whose transaction cannot begin: the broker
 * refuses the producer's transactional id for a while (an ACL that denies it, as a broker whose
 * transaction coordinator cannot serve the id would), so the container's {@code
 * KafkaTransactionManager} cannot open a record's transaction. The broker is this class's own, with
 * an authorizer; the shared one has none.
 */
@SpringBootTest(
    classes = KafkaTransactionBeginFailureTest.App.class,
    properties = {
      "spring.kafka.producer.transaction-id-prefix=ktb-tx-",
      "spring.kafka.consumer.properties.isolation.level=read_committed"
    })
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class KafkaTransactionBeginFailureTest {
  static final String TOPIC = "ktb-orders";
  static final AclBinding DENY_TRANSACTIONS =
      new AclBinding(
          new ResourcePattern(ResourceType.TRANSACTIONAL_ID, "ktb-tx-", PatternType.PREFIXED),
          new AccessControlEntry("User:ANONYMOUS", "*", AclOperation.ALL, AclPermissionType.DENY));
  static KafkaClusterTestKit broker;
  static String schema;
  static final AtomicInteger calls = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) throws Exception {
    broker =
        new KafkaClusterTestKit.Builder(
                new TestKitNodes.Builder()
                    .setCombined(true)
                    .setNumBrokerNodes(1)
                    .setNumControllerNodes(1)
                    .build())
            .setConfigProp("offsets.topic.replication.factor", "1")
            .setConfigProp("offsets.topic.num.partitions", "1")
            .setConfigProp("transaction.state.log.replication.factor", "1")
            .setConfigProp("transaction.state.log.min.isr", "1")
            .setConfigProp("group.initial.rebalance.delay.ms", "0")
            .setConfigProp(
                "authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
            .setConfigProp("allow.everyone.if.no.acl.found", "true")
            .build();
    broker.format();
    broker.startup();
    broker.waitForReadyBrokers();
    try (Admin admin = admin()) {
      admin.createTopics(List.of(new NewTopic(TOPIC, 1, (short) 1))).all().get();
    }
    schema = TestDatabase.newSchema("spring_ktb");
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute(
          "CREATE TABLE effects (listener text NOT NULL, biz_key text, payload text,"
              + " at timestamptz NOT NULL DEFAULT clock_timestamp())");
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
    registry.add("spring.datasource.url", () -> TestDatabase.url(schema));
    registry.add("spring.kafka.bootstrap-servers", broker::bootstrapServers);
    registry.add("spring.datasource.hikari.maximum-pool-size", () -> "6");
    registry.add("spring.kafka.consumer.auto-offset-reset", () -> "earliest");
    registry.add("consumer-dedup.cleanup.enabled", () -> "false");
  }

  @AfterAll
  static void tearDown() throws Exception {
    broker.close();
  }

  static Admin admin() {
    return Admin.create(
        Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrapServers()));
  }

  @Autowired JdbcTemplate jdbc;

  @Test
  void aRecordWhoseKafkaTransactionCannotBeginIsHeldNotSkipped(CapturedOutput output)
      throws Exception {
    try (Admin admin = admin()) {
      admin.createAcls(List.of(DENY_TRANSACTIONS)).all().get();
      try {
        send("order 1", "BEGIN-1");
        // Once the first try has failed, the default after-rollback processor's ten tries,
        // without back-off, take far less than this. A longer wait only held the record through
        // a longer back-off after the fault ended.
        await()
            .atMost(Duration.ofSeconds(30))
            .until(() -> output.getOut().contains("Could not create Kafka transaction"));
        Thread.sleep(3_000);
        assertThat(effects("BEGIN-1")).isZero();
        assertThat(calls).as("listener calls while no transaction could begin").hasValue(0);
        // The fault was real: Kafka refused to begin the record's transaction.
        assertThat(output.getOut())
            .contains("Could not create Kafka transaction")
            .contains("ktb-orders-0@0 waits; not committing past it")
            .doesNotContain("Dedup store unavailable for ktb-orders");
      } finally {
        admin.deleteAcls(List.of(DENY_TRANSACTIONS.toFilter())).all().get();
      }
    }
    send("order 2", "BEGIN-2");
    await().atMost(Duration.ofSeconds(60)).until(() -> effects("BEGIN-2") == 1);
    assertThat(effects("BEGIN-1"))
        .as("the record that came while no transaction could begin, before the one after it")
        .isEqualTo(1);
  }

  private void send(String value, String orderNo) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(TOPIC, 0, null, value);
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    // A producer without a transactional id: the test's own sends are not refused.
    try (KafkaProducer<String, String> producer =
        new KafkaProducer<>(
            Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, broker.bootstrapServers()),
            new StringSerializer(),
            new StringSerializer())) {
      producer.send(record).get();
    }
  }

  private int effects(String orderNo) {
    Integer count =
        jdbc.queryForObject(
            "SELECT count(*) FROM effects WHERE biz_key = ?", Integer.class, orderNo);
    return count == null ? 0 : count;
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }
  }

  static class Listeners {
    final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "begin", header = "order-no")
    @KafkaListener(id = "ktb-orders", topics = TOPIC)
    public void book(ConsumerRecord<String, String> record) {
      calls.incrementAndGet();
      SpringTestEnvironment.effect(
          jdbc, record.topic(), SpringTestEnvironment.header(record, "order-no"), record.value());
    }
  }
}
