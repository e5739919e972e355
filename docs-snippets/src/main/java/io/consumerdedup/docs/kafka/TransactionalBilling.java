package io.consumerdedup.docs.kafka;

import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.TransactionBoundDataSource;
import io.consumerdedup.kafka.DeadLetterHandler;
import io.consumerdedup.kafka.DedupPollLoop;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.JdbcTransactionalProcessor;
import io.consumerdedup.kafka.KeyExtractors;
import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.List;
import java.util.Map;
import javax.sql.DataSource;

/**
 * Mode TRANSACTIONAL for a plain consumer: the charge is a write to the dedup table's database,
 * committed with the dedup row (docs/kafka-clients.md, examples/README.md).
 */
final class TransactionalBilling {
  private TransactionalBilling() {}

  static DedupPollLoop<String, String> loop(
      DataSource pool,
      Map<String, Object> consumerConfig,
      DeadLetterHandler<String, String> deadLetters) {
    // tag::transactional[]
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(pool); // pool: HikariCP
    IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(transactions).build())
            .mode(DedupMode.TRANSACTIONAL)
            .build();
    IdempotentRecordHandler<String, String> payments =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType("payment")
            .key(KeyExtractors.header("order-no"))
            .groupId("billing")
            .handler(
                record -> {
                  // the poll's transaction, which also holds the dedup rows
                  try (Connection connection = transactions.getConnection()) {
                    bookCharge(connection, record.value());
                  }
                })
            .build();
    DedupPollLoop<String, String> loop =
        DedupPollLoop.builder(
                consumerConfig,
                List.of("payments"),
                JdbcTransactionalProcessor.of(transactions, payments))
            .deadLetterHandler(deadLetters) // a KafkaDeadLetterPublisher, as in the README
            .build();
    // end::transactional[]
    return loop;
  }

  static void bookCharge(Connection connection, String amount) throws SQLException {
    try (PreparedStatement insert =
        connection.prepareStatement("INSERT INTO charges (amount) VALUES (?)")) {
      insert.setBigDecimal(1, new BigDecimal(amount));
      insert.executeUpdate();
    }
  }
}
