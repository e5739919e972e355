package io.consumerdedup.spring.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

/** What a consumer's commits may pass of its records' SUCCESS marks, on PostgreSQL. */
class SuccessMarksTest {
  private static final TopicPartition PARTITION = new TopicPartition("payments", 0);

  /**
   * A SUCCESS the database refused, kept by the executor to write in the background, then given up
   * when the executor closes (an application stopping while the container still runs, its stop
   * having outlasted its timeout): a commit must not pass its record in either state, or the record
   * would never come again while its key stayed PROCESSING.
   */
  @Test
  void aMarkGivenUpWhenItsExecutorClosesIsNeverPassed() throws Exception {
    String schema = TestDatabase.newSchema("success_marks");
    try (HikariDataSource pool = TestDatabase.dataSource(schema, 4)) {
      try (Connection connection = pool.getConnection();
          Statement statement = connection.createStatement()) {
        statement.execute(
            "CREATE FUNCTION refuse_success() RETURNS trigger AS $$ BEGIN"
                + " IF NEW.status = 'SUCCESS' THEN"
                + " RAISE EXCEPTION 'injected: SUCCESS refused' USING ERRCODE = '40001';"
                + " END IF; RETURN NEW; END $$ LANGUAGE plpgsql");
        statement.execute(
            "CREATE TRIGGER refuse_success BEFORE UPDATE ON consumer_dedup FOR EACH ROW"
                + " EXECUTE FUNCTION refuse_success()");
      }
      IdempotentExecutor executor =
          IdempotentExecutor.builder(JdbcDedupStore.builder(pool).retryMaxAttempts(1).build())
              .build();
      DedupKey key = DedupKey.of("payment", "P-1");
      DedupClaim claim = executor.claim(key, null, "payments-0@5");
      CompletableFuture<Void> written = claim.completeAsync();
      assertThatThrownBy(() -> written.get(10, TimeUnit.SECONDS))
          .hasCauseInstanceOf(DedupStoreUnavailableException.class);

      SuccessMarks marks = new SuccessMarks();
      marks.add(
          new ConsumerRecord<>(PARTITION.topic(), PARTITION.partition(), 5, null, "charge 10"),
          key,
          "payments-0@5",
          written,
          Duration.ofMillis(100),
          SuccessMarks.keptBy(executor, key));
      Map<TopicPartition, OffsetAndMetadata> asked = Map.of(PARTITION, new OffsetAndMetadata(6));

      assertThat(marks.durable(asked, false))
          .as("committed while the executor keeps the SUCCESS to write it")
          .containsEntry(PARTITION, new OffsetAndMetadata(5));
      executor.close();
      assertThat(executor.unrecordedOutcomes()).as("given up").isEmpty();
      assertThat(marks.durable(asked, false))
          .as("committed after the executor gave the SUCCESS up")
          .containsEntry(PARTITION, new OffsetAndMetadata(5));
    } finally {
      TestDatabase.dropSchema(schema);
    }
  }

  /**
   * A record whose container transaction did not commit: no commit passes it, and what is cut is
   * owed, until a transaction of it or of a later record of its partition commits, or the
   * consumer's position has passed it (given up); not for ever.
   */
  @Test
  void aRecordWhoseTransactionRolledBackIsNotPassedUntilItIsDoneOrGivenUp() {
    SuccessMarks marks = new SuccessMarks();
    Map<TopicPartition, OffsetAndMetadata> asked = Map.of(PARTITION, new OffsetAndMetadata(8));

    marks.rolledBack(record(5));
    assertThat(marks.durable(asked, false)).containsEntry(PARTITION, new OffsetAndMetadata(5));
    marks.transactionCommitted(record(4));
    marks.passedBy(partition -> 5L);
    assertThat(marks.owedNow(false))
        .as("owed while the record is still to come again")
        .containsEntry(PARTITION, new OffsetAndMetadata(5));

    marks.transactionCommitted(record(5));
    assertThat(marks.owedNow(false))
        .as("owed once its transaction committed")
        .containsEntry(PARTITION, new OffsetAndMetadata(8));

    marks.rolledBack(record(9));
    marks.rolledBack(record(11));
    Map<TopicPartition, OffsetAndMetadata> later = Map.of(PARTITION, new OffsetAndMetadata(12));
    assertThat(marks.durable(later, false)).containsEntry(PARTITION, new OffsetAndMetadata(9));
    marks.passedBy(partition -> 10L);
    assertThat(marks.durable(later, false))
        .as("committed once the position passed the first record (given up), not the second")
        .containsEntry(PARTITION, new OffsetAndMetadata(11));
    marks.passedBy(partition -> 12L);
    assertThat(marks.durable(later, false)).containsEntry(PARTITION, new OffsetAndMetadata(12));

    marks.rolledBack(record(12));
    marks.forget(List.of(PARTITION));
    assertThat(marks.isEmpty()).as("nothing held once the partition is revoked").isTrue();
  }

  /**
   * One record reaching two {@code @Idempotent} methods, one per biz type: each key's mark holds
   * the commit back until it is written, whatever the other key's met (written, or found a
   * duplicate), and a new delivery's mark replaces only its own key's.
   */
  @Test
  void everyMarkOfARecordHoldsTheCommitBackUntilItIsWritten() {
    SuccessMarks marks = new SuccessMarks();
    Map<TopicPartition, OffsetAndMetadata> asked = Map.of(PARTITION, new OffsetAndMetadata(6));
    DedupKey order = DedupKey.of("order", "O-1");
    DedupKey invoice = DedupKey.of("invoice", "I-1");
    CompletableFuture<Void> orderWritten = new CompletableFuture<>();
    CompletableFuture<Void> invoiceWritten = new CompletableFuture<>();
    add(marks, order, orderWritten);
    marks.written(record(5), invoice);
    assertThat(marks.durable(asked, false))
        .as("committed once the invoice was found a duplicate")
        .containsEntry(PARTITION, new OffsetAndMetadata(5));

    add(marks, invoice, invoiceWritten);
    invoiceWritten.complete(null);
    assertThat(marks.durable(asked, false))
        .as("committed once the invoice's mark was written")
        .containsEntry(PARTITION, new OffsetAndMetadata(5));
    assertThat(marks.awaitUnwritten())
        .as("a share batch's records whose marks are not all written")
        .containsExactly(new Coordinates(PARTITION.topic(), PARTITION.partition(), 5));

    add(marks, order, orderWritten);
    add(marks, invoice, invoiceWritten);
    CompletableFuture<Void> orderAgain = new CompletableFuture<>();
    add(marks, order, orderAgain);
    orderWritten.complete(null);
    assertThat(marks.durable(asked, false))
        .as("committed with the order's mark of a later delivery on its way")
        .containsEntry(PARTITION, new OffsetAndMetadata(5));
    orderAgain.complete(null);
    assertThat(marks.durable(asked, false)).containsEntry(PARTITION, new OffsetAndMetadata(6));
  }

  private static void add(SuccessMarks marks, DedupKey key, CompletableFuture<Void> written) {
    marks.add(record(5), key, "payments-0@5", written, Duration.ZERO, () -> false);
  }

  private static ConsumerRecord<String, String> record(long offset) {
    return new ConsumerRecord<>(PARTITION.topic(), PARTITION.partition(), offset, null, "charge");
  }
}
