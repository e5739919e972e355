package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupInProgressException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupKeyMalformedException;
import io.consumerdedup.core.DedupKeyMissingException;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The record handler over the real PostgreSQL store, with hand-built records: business keys, the
 * missing-key policies, and retries after a failure.
 */
class IdempotentRecordHandlerTest {
  private static String schema;
  private static HikariDataSource dataSource;
  private static IdempotentExecutor executor;

  private final Effects effects = new Effects();
  private String topic;
  private String bizType;

  @BeforeAll
  static void setUpClass() {
    schema = TestDatabase.newSchema("record_handler");
    dataSource = TestDatabase.dataSource(schema, 2);
    executor = IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build()).build();
  }

  @AfterAll
  static void tearDownClass() {
    executor.close();
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  @BeforeEach
  void setUp() {
    String id = UUID.randomUUID().toString().substring(0, 8);
    topic = "payments-" + id;
    bizType = "payment-" + id;
  }

  private ConsumerRecord<String, String> record(long offset, String value, String orderNo) {
    ConsumerRecord<String, String> record = new ConsumerRecord<>(topic, 0, offset, "k", value);
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    return record;
  }

  private ConsumerRecord<String, String> withoutKey(long offset, String value) {
    return new ConsumerRecord<>(topic, 0, offset, "k", value);
  }

  private IdempotentRecordHandler<String, String> handler(MissingKeyPolicy policy) {
    return IdempotentRecordHandler.<String, String>builder(executor)
        .bizType(bizType)
        .key(KeyExtractors.header("order-no"))
        .missingKeyPolicy(policy)
        .groupId("billing")
        .handler(record -> effects.apply(record.value()))
        .build();
  }

  @Test
  void aSecondDeliveryOfTheSameKeyIsADuplicateAndIsNotApplied() {
    IdempotentRecordHandler<String, String> handler = handler(MissingKeyPolicy.FAIL);

    assertThat(handler.handle(record(1, "charge ORD-1", "ORD-1"))).isEqualTo(Outcome.PROCESSED);
    assertThat(handler.handle(record(2, "charge ORD-1", "ORD-1"))).isEqualTo(Outcome.DUPLICATE);

    assertThat(effects.all()).containsOnly(Map.entry("charge ORD-1", 1));
    DedupRecord stored = find("ORD-1");
    assertThat(stored.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(stored.source()).contains(topic + "-0@1 (group billing)");
  }

  @Test
  void underFailARecordWithoutKeyIsRefusedNamingTheRecordAndNothingIsApplied() throws Exception {
    IdempotentRecordHandler<String, String> handler = handler(MissingKeyPolicy.FAIL);

    assertThatThrownBy(() -> handler.handle(withoutKey(7, "charge ?")))
        .isExactlyInstanceOf(DedupKeyMissingException.class)
        .hasMessageContaining("no business key")
        .hasMessageContaining(topic + "-0@7")
        .hasMessageContaining("group billing");

    assertThat(effects.all()).isEmpty();
    assertThat(rowsOfThisType()).isZero();
  }

  @Test
  void aKeyHeaderNameThatDiffersFromTheProducersIsRefusedNamingTheHeadersTheRecordHas() {
    // The name the handler was given, orderNo, is not the one the producer writes, order-no.
    IdempotentRecordHandler<String, String> handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(bizType)
            .key(KeyExtractors.header("orderNo"))
            .groupId("billing")
            .handler(record -> effects.apply(record.value()))
            .build();
    ConsumerRecord<String, String> sent = record(7, "charge ORD-7", "ORD-7");
    sent.headers().add("traceparent", new byte[] {1});

    assertThatThrownBy(() -> handler.handle(sent))
        .isExactlyInstanceOf(DedupKeyMissingException.class)
        .hasMessageContaining("header 'orderNo' is absent or empty")
        .hasMessageContaining("the record's headers: 'order-no', 'traceparent'");
    assertThatThrownBy(() -> handler.handle(withoutKey(8, "charge ?")))
        .hasMessageContaining("the record has no headers");
    assertThat(effects.all()).isEmpty();
  }

  @Test
  void underProcessWithoutDedupARecordWithoutKeyIsAppliedOnEveryDelivery() throws Exception {
    IdempotentRecordHandler<String, String> handler =
        handler(MissingKeyPolicy.PROCESS_WITHOUT_DEDUP);

    assertThat(handler.handle(withoutKey(7, "charge ?"))).isEqualTo(Outcome.PROCESSED);
    assertThat(handler.handle(withoutKey(7, "charge ?"))).isEqualTo(Outcome.PROCESSED);

    assertThat(effects.count("charge ?")).isEqualTo(2);
    assertThat(rowsOfThisType()).isZero();
  }

  @Test
  void underUseCoordinatesTheSameRecordIsAppliedOnceButACopyAtAnotherOffsetAgain() {
    IdempotentRecordHandler<String, String> handler = handler(MissingKeyPolicy.USE_COORDINATES);

    assertThat(handler.handle(withoutKey(7, "charge ?"))).isEqualTo(Outcome.PROCESSED);
    assertThat(handler.handle(withoutKey(7, "charge ?"))).isEqualTo(Outcome.DUPLICATE);
    assertThat(handler.handle(withoutKey(8, "charge ?"))).isEqualTo(Outcome.PROCESSED);

    assertThat(effects.count("charge ?")).isEqualTo(2);
    assertThat(find(topic + "-0@7").status()).isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void aMalformedKeyIsRefusedWhateverThePolicy() {
    ConsumerRecord<String, String> record = withoutKey(9, "charge ?");
    record.headers().add("order-no", new byte[] {(byte) 0xFF});

    for (MissingKeyPolicy policy : MissingKeyPolicy.values()) {
      assertThatThrownBy(() -> handler(policy).handle(record))
          .as(policy.name())
          .isInstanceOf(DedupKeyMalformedException.class)
          .hasMessageContaining("header 'order-no'")
          .hasMessageContaining(topic + "-0@9 (group billing)");
    }
    assertThat(effects.all()).isEmpty();
  }

  @Test
  void aKeyWithAControlCharacterIsMalformed() {
    assertThatThrownBy(() -> handler(MissingKeyPolicy.FAIL).handle(record(3, "x", "ORD\u00011")))
        .isInstanceOf(DedupKeyMalformedException.class)
        .hasMessageContaining(topic + "-0@3");
  }

  @Test
  void aFailedHandlerLeavesTheKeyFailedAndTheNextDeliveryRetriesIt() {
    boolean[] fail = {true};
    IdempotentRecordHandler<String, String> handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(bizType)
            .key(KeyExtractors.header("order-no"))
            .handler(
                record -> {
                  if (fail[0]) {
                    throw new IllegalStateException("provider down");
                  }
                  effects.apply(record.value());
                })
            .build();

    assertThatThrownBy(() -> handler.handle(record(1, "charge ORD-5", "ORD-5")))
        .isExactlyInstanceOf(IllegalStateException.class)
        .hasMessage("provider down");
    DedupRecord failed = find("ORD-5");
    assertThat(failed.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(failed.lastError()).hasValueSatisfying(e -> assertThat(e).contains("provider down"));

    fail[0] = false;
    assertThat(handler.handle(record(1, "charge ORD-5", "ORD-5"))).isEqualTo(Outcome.PROCESSED);

    assertThat(effects.all()).containsOnly(Map.entry("charge ORD-5", 1));
    assertThat(find("ORD-5").attempts()).isEqualTo(2);
  }

  @Test
  void attemptsAreTheTablesCountForTheRecordsKeyAndEmptyWhenItHasNone() {
    IdempotentRecordHandler<String, String> failing =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(bizType)
            .key(KeyExtractors.header("order-no"))
            .missingKeyPolicy(MissingKeyPolicy.PROCESS_WITHOUT_DEDUP)
            .handler(
                record -> {
                  throw new IllegalStateException("provider down");
                })
            .build();
    ConsumerRecord<String, String> record = record(1, "charge ORD-6", "ORD-6");
    assertThat(failing.attempts(record)).as("never claimed").isEmpty();

    for (int i = 0; i < 2; i++) {
      assertThatThrownBy(() -> failing.process(record)).hasMessage("provider down");
    }

    assertThat(failing.attempts(record)).hasValue(2);
    // The count belongs to the business action, whichever record carries its key.
    assertThat(failing.attempts(record(9, "charge ORD-6 again", "ORD-6"))).hasValue(2);
    assertThat(failing.attempts(withoutKey(3, "charge ?"))).isEmpty();
    ConsumerRecord<String, String> malformed = withoutKey(4, "charge ?");
    malformed.headers().add("order-no", new byte[] {(byte) 0xFF});
    assertThat(failing.attempts(malformed)).isEmpty();
  }

  @Test
  void aRecordWhoseClaimMadeWithItsPollWasTakenOverMeanwhileIsNotApplied() throws Exception {
    // An earlier record's handler outlasts the later record's lease (here: its key is taken over
    // by a rival while the handler runs); the later record must not run under the lost claim.
    try (IdempotentExecutor shortLeases =
        IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build())
            .lease(Duration.ofSeconds(3))
            .renewalInterval(Duration.ofMillis(100))
            .build()) {
      ConsumerRecord<String, String> slow = record(1, "charge ORD-7", "ORD-7");
      ConsumerRecord<String, String> later = record(2, "charge ORD-8", "ORD-8");
      IdempotentRecordHandler<String, String> handler =
          IdempotentRecordHandler.<String, String>builder(shortLeases)
              .bizType(bizType)
              .key(KeyExtractors.header("order-no"))
              .handler(
                  record -> {
                    if (record == slow) {
                      takeOver("ORD-8");
                      Thread.sleep(1_000); // several renewals: the refused one reports the loss
                    }
                    effects.apply(record.value());
                  })
              .build();

      handler.prepare(List.of(slow, later));
      assertThat(handler.process(slow)).isEqualTo(Outcome.PROCESSED);
      assertThatThrownBy(() -> handler.process(later))
          .as("the rival holds ORD-8 now: the record is held, not applied")
          .isInstanceOf(DedupInProgressException.class);
      handler.settle();

      assertThat(effects.all()).containsOnly(Map.entry("charge ORD-7", 1));
      DedupRecord rivals = find("ORD-8");
      assertThat(rivals.status()).isEqualTo(DedupStatus.PROCESSING);
      assertThat(rivals.owner()).as("the rival's claim is left alone").isEqualTo("rival");
    }
  }

  /** What another consumer does after the key's lease ran out: its own claim, a new claim id. */
  private void takeOver(String bizKey) throws SQLException {
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      int taken =
          statement.executeUpdate(
              "UPDATE consumer_dedup SET owner = 'rival', claim_id = 'rival-claim',"
                  + " attempts = attempts + 1, lease_until = now() + interval '1 hour'"
                  + " WHERE biz_type = '"
                  + bizType
                  + "' AND biz_key = '"
                  + bizKey
                  + "' AND status = 'PROCESSING'");
      assertThat(taken).as("the key was claimed with the poll, and is taken over").isEqualTo(1);
    }
  }

  private DedupRecord find(String bizKey) {
    return executor.store().find(DedupKey.of(bizType, bizKey)).orElseThrow();
  }

  private int rowsOfThisType() throws SQLException {
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement();
        ResultSet rows =
            statement.executeQuery(
                "SELECT count(*) FROM consumer_dedup WHERE biz_type = '" + bizType + "'")) {
      rows.next();
      return rows.getInt(1);
    }
  }
}
