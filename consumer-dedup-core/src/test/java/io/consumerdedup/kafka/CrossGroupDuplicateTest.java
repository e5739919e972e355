package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.core.internal.CrossGroupDuplicates;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.UUID;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;

/**
 * Two listeners in different consumer groups under one biz type, each in an application of its own
 * (an executor each) on one dedup table: the second skips the first one's keys as duplicates, and
 * says so once at WARN, naming both groups and the remedy.
 */
class CrossGroupDuplicateTest {
  private static String schema;
  private static HikariDataSource dataSource;

  private final Logger logger = (Logger) LoggerFactory.getLogger(CrossGroupDuplicates.class);
  private final ListAppender<ILoggingEvent> logged = new ListAppender<>();
  private final Effects billed = new Effects();
  private final Effects pointsGranted = new Effects();
  private IdempotentExecutor billingApp;
  private IdempotentExecutor pointsApp;
  private String topic;
  private String bizType;

  @BeforeAll
  static void setUpClass() {
    schema = TestDatabase.newSchema("cross_group");
    dataSource = TestDatabase.dataSource(schema, 4);
  }

  @AfterAll
  static void tearDownClass() {
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  @BeforeEach
  void setUp() {
    String id = UUID.randomUUID().toString().substring(0, 8);
    topic = "payments-" + id;
    bizType = "payment-" + id;
    billingApp = IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build()).build();
    pointsApp = IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build()).build();
    logged.start();
    logger.addAppender(logged);
  }

  @AfterEach
  void tearDown() {
    logger.detachAppender(logged);
    billingApp.close();
    pointsApp.close();
  }

  private IdempotentRecordHandler<String, String> listener(
      IdempotentExecutor executor, String group, Effects effects) {
    return IdempotentRecordHandler.<String, String>builder(executor)
        .bizType(bizType)
        .key(KeyExtractors.header("order-no"))
        .groupId(group)
        .handler(record -> effects.apply(record.value()))
        .build();
  }

  private ConsumerRecord<String, String> record(long offset, String orderNo) {
    ConsumerRecord<String, String> record = new ConsumerRecord<>(topic, 0, offset, "k", orderNo);
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    return record;
  }

  @Test
  void aDuplicateWrittenByAnotherGroupIsWarnedOncePerPairNamingBothGroupsAndTheRemedy() {
    IdempotentRecordHandler<String, String> billing = listener(billingApp, "billing", billed);
    IdempotentRecordHandler<String, String> points = listener(pointsApp, "points", pointsGranted);

    List<Outcome> outcomes =
        List.of(
            billing.handle(record(1, "ORD-1")),
            points.handle(record(1, "ORD-1")),
            billing.handle(record(2, "ORD-2")),
            points.handle(record(2, "ORD-2")),
            billing.handle(record(1, "ORD-1")));

    assertThat(outcomes)
        .containsExactly(
            Outcome.PROCESSED,
            Outcome.DUPLICATE,
            Outcome.PROCESSED,
            Outcome.DUPLICATE,
            Outcome.DUPLICATE);
    assertThat(billed.count("ORD-1") + billed.count("ORD-2")).isEqualTo(2);
    assertThat(pointsGranted.all()).as("points granted: none, the misconfiguration").isEmpty();
    List<ILoggingEvent> warnings =
        logged.list.stream().filter(event -> event.getLevel() == Level.WARN).toList();
    assertThat(warnings).as("one warning for the pair, none for the same group").hasSize(1);
    assertThat(warnings.get(0).getFormattedMessage())
        .contains("Consumer group 'points' skipped " + bizType + "/ORD-1")
        .contains("written by consumer group 'billing' (" + topic + "-0@1 (group billing))")
        .contains("share the biz type '" + bizType + "'")
        .contains("Give each kind of action its own biz type");
  }

  @Test
  void aDuplicateFromTheSameGroupOrWithoutAKnownGroupIsNotWarned() {
    IdempotentRecordHandler<String, String> billing = listener(billingApp, "billing", billed);
    IdempotentRecordHandler<String, String> billingElsewhere =
        listener(pointsApp, "billing", billed);
    IdempotentRecordHandler<String, String> noGroup =
        IdempotentRecordHandler.<String, String>builder(pointsApp)
            .bizType(bizType)
            .key(KeyExtractors.header("order-no"))
            .handler(record -> billed.apply(record.value()))
            .build();

    billing.handle(record(1, "ORD-1"));
    assertThat(billingElsewhere.handle(record(1, "ORD-1"))).isEqualTo(Outcome.DUPLICATE);
    assertThat(noGroup.handle(record(1, "ORD-1"))).isEqualTo(Outcome.DUPLICATE);

    assertThat(logged.list).noneMatch(event -> event.getLevel() == Level.WARN);
  }
}
