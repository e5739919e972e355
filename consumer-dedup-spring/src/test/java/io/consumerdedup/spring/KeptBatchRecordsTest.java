package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.jdbc.datasource.TransactionAwareDataSourceProxy;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.transaction.support.TransactionTemplate;

/**
 * The SUCCESS marks of a batch's records start one by one: an {@code Error} while starting one
 * (here from the application's {@code DedupListener}, which the start of a mark in the listener's
 * transaction tells on the calling thread) left the marks after it unstarted, so their claims were
 * given back and their records ran again after a restart.
 */
class KeptBatchRecordsTest {
  private String schema;
  private HikariDataSource pool;
  private IdempotentExecutor executor;
  private final List<String> completed = new ArrayList<>();

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("spring_kept_marks");
    pool = TestDatabase.dataSource(schema, 2);
    DedupListener failingOnSecond =
        new DedupListener() {
          @Override
          public void completed(DedupKey key, int attempt, Duration handlerTime) {
            completed.add(key.bizKey());
            if (key.bizKey().equals("K-2")) {
              throw new OutOfMemoryError("while starting the mark of K-2");
            }
          }
        };
    executor =
        IdempotentExecutor.builder(
                JdbcDedupStore.builder(new TransactionAwareDataSourceProxy(pool)).build())
            .mode(DedupMode.TRANSACTIONAL)
            .listener(failingOnSecond)
            .build();
  }

  @AfterEach
  void tearDown() {
    executor.close();
    pool.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void anErrorStartingOneMarkAtTheEndOfTheBatchStillStartsTheOthersAndIsRethrown() {
    startMarksOfThree(kept -> kept.completeBefore(3));
  }

  @Test
  void anErrorStartingOneMarkOnTheListenersAcknowledgmentStillStartsTheOthersAndIsRethrown() {
    // From a thread of its own (a send's callback): in the method's transaction on its thread, the
    // marks would wait for that transaction's commit.
    startMarksOfThree(kept -> onAThreadOfItsOwn(new HeldBatchAcknowledgment(() -> {}, kept)));
  }

  private static void onAThreadOfItsOwn(Acknowledgment ack) {
    AtomicReference<Error> thrown = new AtomicReference<>();
    Thread callback =
        new Thread(
            () -> {
              try {
                ack.acknowledge();
              } catch (Error e) {
                thrown.set(e);
              }
            });
    callback.start();
    try {
      callback.join(10_000);
    } catch (InterruptedException e) {
      throw new IllegalStateException(e);
    }
    if (thrown.get() != null) {
      throw thrown.get();
    }
  }

  private void startMarksOfThree(Consumer<KeptBatchRecords> start) {
    List<DedupClaim> claims = new ArrayList<>();
    new TransactionTemplate(new DataSourceTransactionManager(pool))
        .executeWithoutResult(
            status -> {
              KeptBatchRecords kept = new KeptBatchRecords();
              for (int i = 1; i <= 3; i++) {
                DedupClaim claim = executor.claim(DedupKey.of("kept", "K-" + i), null, null);
                claims.add(claim);
                kept.add("payload " + i, new ConsumerRecord<>("t", 0, i, null, null), i, claim);
              }

              assertThatThrownBy(() -> start.accept(kept))
                  .isInstanceOf(OutOfMemoryError.class)
                  .hasMessage("while starting the mark of K-2");
            });

    assertThat(completed).as("marks started").containsExactly("K-1", "K-2", "K-3");
    assertThat(claims).allSatisfy(claim -> assertThat(claim.isEnded()).isTrue());
  }
}
