package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.jdbc.datasource.TransactionAwareDataSourceProxy;
import org.springframework.transaction.support.TransactionTemplate;

/**
 * A batch listener in ack mode MANUAL may acknowledge on another thread (the callback of its last
 * send) while the container thread is ending the batch. Both start the records' SUCCESS marks: the
 * end of the batch must not pass a mark the acknowledgment is still starting, nor start one twice.
 * The start of a mark is held open here by the application's {@code DedupListener}, which the start
 * of a mark in mode TRANSACTIONAL tells on the calling thread.
 */
class HeldBatchAcknowledgmentThreadTest {
  static final String ACK_THREAD = "send-callback";

  private String schema;
  private HikariDataSource pool;
  private IdempotentExecutor executor;
  private final List<String> completed = new CopyOnWriteArrayList<>();
  private final CountDownLatch inFirstMark = new CountDownLatch(1);
  private final CountDownLatch letFirstMarkGo = new CountDownLatch(1);
  private final ExecutorService threads = Executors.newCachedThreadPool();

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("spring_ack_thread");
    pool = TestDatabase.dataSource(schema, 2);
    DedupListener slowFirstMarkOnTheAckThread =
        new DedupListener() {
          @Override
          public void completed(DedupKey key, int attempt, Duration handlerTime) {
            if (key.bizKey().equals("K-1") && Thread.currentThread().getName().equals(ACK_THREAD)) {
              inFirstMark.countDown();
              try {
                letFirstMarkGo.await(10, TimeUnit.SECONDS);
              } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
              }
            }
            completed.add(key.bizKey());
          }
        };
    executor =
        IdempotentExecutor.builder(
                JdbcDedupStore.builder(new TransactionAwareDataSourceProxy(pool)).build())
            .mode(DedupMode.TRANSACTIONAL)
            .listener(slowFirstMarkOnTheAckThread)
            .build();
  }

  @AfterEach
  void tearDown() {
    letFirstMarkGo.countDown();
    threads.shutdownNow();
    executor.close();
    pool.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void theBatchEndsOnlyOnceTheMarksTheAcknowledgmentStartsAreStarted() throws Exception {
    new TransactionTemplate(new DataSourceTransactionManager(pool))
        .executeWithoutResult(
            status -> {
              try {
                KeptBatchRecords kept = new KeptBatchRecords();
                for (int i = 1; i <= 3; i++) {
                  DedupClaim claim = executor.claim(DedupKey.of("kept", "K-" + i), null, null);
                  kept.add("payload " + i, new ConsumerRecord<>("t", 0, i, null, null), i, claim);
                }
                HeldBatchAcknowledgment ack = new HeldBatchAcknowledgment(() -> {}, kept);
                Thread callback = new Thread(ack::acknowledge, ACK_THREAD);
                callback.start();
                assertThat(inFirstMark.await(5, TimeUnit.SECONDS)).isTrue();

                CompletableFuture<BatchStop> end =
                    CompletableFuture.supplyAsync(() -> kept.completeBefore(3), threads);
                Thread.sleep(300);
                assertThat(end)
                    .as("the batch's end while the acknowledgment is starting K-1's mark")
                    .isNotDone();

                letFirstMarkGo.countDown();
                callback.join(5_000);
                assertThat(end.get(5, TimeUnit.SECONDS)).as("where the batch stops").isNull();
                assertThat(completed)
                    .as("marks started, once each")
                    .containsExactlyInAnyOrder("K-1", "K-2", "K-3");
              } catch (Exception e) {
                throw new IllegalStateException(e);
              }
            });
  }
}
