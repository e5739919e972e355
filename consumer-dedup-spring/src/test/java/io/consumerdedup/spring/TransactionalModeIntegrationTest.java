package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.ConcurrentKafkaListenerContainerFactoryConfigurer;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.RecordInterceptor;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.transaction.interceptor.TransactionAspectSupport;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * {@code consumer-dedup.mode=TRANSACTIONAL}: the dedup row is written in the listener's own
 * transaction (from {@code @Transactional}, or from the container's transaction manager), with no
 * error handler bean of the application's (so consumer-dedup's default one is used).
 */
@SpringBootTest(
    classes = TransactionalModeIntegrationTest.App.class,
    properties = {
      "consumer-dedup.mode=transactional",
      // tx-copy-a and tx-copy-b are two groups competing for one key on purpose.
      "consumer-dedup.shared-biz-types=transfer"
    })
@DirtiesContext
class TransactionalModeIntegrationTest {
  static final Duration WAIT = Duration.ofSeconds(30);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "spring_tx",
        "tx-ledger",
        "tx-concurrent",
        "tx-missing",
        "tx-none",
        "tx-separate-commit",
        "tx-swallows",
        "tx-checked",
        "tx-rollback-only",
        "tx-after-commit",
        "tx-after-commit-own",
        "tx-read-only");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired MeterRegistry registry;

  @Test
  void rollbackLeavesNeitherBusinessRowNorDedupRowAndTheRedeliveryAppliesItOnce() throws Exception {
    send(template, "tx-ledger", "debit 30", "order-no", "TX-1");

    // The first attempt wrote its business row, then threw; the second attempt waits here.
    assertThat(Switches.secondAttemptStarted.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();
    assertThat(effects("ledger", "TX-1")).isZero();
    assertThat(store.find(DedupKey.of("ledger", "TX-1"))).isEmpty();
    Switches.releaseSecondAttempt.countDown();

    await().atMost(WAIT).until(() -> effects("ledger", "TX-1") == 1);
    await()
        .atMost(WAIT)
        .untilAsserted(
            () -> {
              DedupRecord record = store.find(DedupKey.of("ledger", "TX-1")).orElseThrow();
              assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
              // The rolled-back first attempt left no trace, not even an attempt count.
              assertThat(record.attempts()).isEqualTo(1);
            });
    assertThat(Switches.ledgerCalls.get("TX-1").get()).isEqualTo(2);

    send(template, "tx-ledger", "debit 30", "order-no", "TX-1");
    await().atMost(WAIT).until(() -> outcomes("ledger", "duplicate") == 1);
    assertThat(effects("ledger", "TX-1")).isEqualTo(1);
  }

  @Test
  void inModeSeparateACommitThatFailsAfterTheListenerReturnedLeavesTheKeyToTheRedelivery()
      throws Exception {
    jdbc.execute(
        "CREATE TABLE IF NOT EXISTS bookings (order_no text,"
            + " CONSTRAINT bookings_once UNIQUE (order_no) DEFERRABLE INITIALLY DEFERRED)");
    send(template, "tx-separate-commit", "book 5", "order-no", "SEP-1");

    await().atMost(WAIT).until(() -> bookings("SEP-1") == 1);
    // The SUCCESS mark follows the listener's commit: wait for it rather than race it.
    await()
        .atMost(WAIT)
        .until(
            () -> store.find(DedupKey.of("booking", "SEP-1")).orElseThrow().status(),
            status -> status == DedupStatus.SUCCESS);
    DedupRecord record = store.find(DedupKey.of("booking", "SEP-1")).orElseThrow();
    assertThat(record.attempts())
        .as("the attempt whose commit failed, then the redelivery")
        .isEqualTo(2);
    assertThat(record.lastError()).as("the failed commit's error, cleared by SUCCESS").isEmpty();
    assertThat(Switches.ledgerCalls.get("SEP-1")).hasValue(2);
  }

  private int bookings(String orderNo) {
    Integer count =
        jdbc.queryForObject(
            "SELECT count(*) FROM bookings WHERE order_no = ?", Integer.class, orderNo);
    return count == null ? 0 : count;
  }

  @Test
  void twoConcurrentCopiesUnderTheContainersTransactionManagerApplyItOnce() throws Exception {
    // Two consumer groups receive the same record; a barrier releases both at once, and the second
    // claim waits on the first one's uncommitted row.
    send(template, "tx-concurrent", "transfer 12", "order-no", "TR-1");

    await().atMost(WAIT).until(() -> outcomes("transfer", "duplicate") == 1);
    assertThat(effects("transfer", "TR-1")).isEqualTo(1);
    assertThat(outcomes("transfer", "processed")).isEqualTo(1);
    assertThat(store.find(DedupKey.of("transfer", "TR-1")).orElseThrow().status())
        .isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void missingKeyWithoutDeadLetterTopicIsLoggedAndSkippedWithoutRetry() throws Exception {
    send(template, "tx-missing", "no key here");
    send(template, "tx-missing", "with key", "order-no", "MISS-2");

    await().atMost(WAIT).until(() -> effects("missing", "MISS-2") == 1);
    assertThat(effects("missing", null)).isZero();
    assertThat(outcomes("missing", "missing_key")).isEqualTo(1);
  }

  @Test
  void transactionalModeWithoutTransactionHoldsTheRecordNamingTheListener() throws Exception {
    send(template, "tx-none", "anything", "order-no", "NONE-1");

    // Held and tried again (never applied unprotected, never skipped) until it is fixed.
    await().atMost(WAIT).until(() -> failuresOf("tx-none-0@0").size() >= 2);
    assertThat(failuresOf("tx-none-0@0").get(0))
        .contains("TransactionalModeIntegrationTest$TxListeners#withoutTransaction")
        .contains("no transaction is bound to the dedup table's DataSource");
    assertThat(effects("none", "NONE-1")).isZero();
    assertThat(store.find(DedupKey.of("none", "NONE-1"))).isEmpty();
  }

  @Test
  void aListenerThatCatchesItsFailedStatementIsRetriedNotPassedWithNothingCommitted()
      throws Exception {
    send(template, "tx-swallows", "debit 8", "order-no", "SW-1");
    send(template, "tx-swallows", "debit 9", "order-no", "SW-2");

    // SW-2 comes after SW-1 on the one partition: once it is applied, SW-1 is done with.
    await().atMost(WAIT).until(() -> effects("swallows", "SW-2") == 1);
    assertThat(effects("swallows", "SW-1"))
        .as("SW-1's effect, applied by the retry of the attempt whose transaction was aborted")
        .isEqualTo(1);
    assertThat(Switches.ledgerCalls.get("SW-1")).hasValue(2);
    assertThat(Switches.failures)
        .filteredOn(failure -> failure.contains("aborted the transaction"))
        .as("the first attempt's failure, from its commit")
        .hasSize(1);
  }

  @Test
  void aListenerThatThrowsACheckedExceptionIsRetriedThoughItsTransactionCommits() throws Exception {
    send(template, "tx-checked", "debit 4", "order-no", "CK-1");
    send(template, "tx-checked", "debit 5", "order-no", "CK-2");

    await().atMost(WAIT).until(() -> effects("checked", "CK-2") == 1);
    assertThat(Switches.ledgerCalls.get("CK-1"))
        .as("calls of the listener for CK-1: the one that threw, then the retry")
        .hasValue(2);
    assertThat(store.find(DedupKey.of("checked", "CK-1")).orElseThrow().status())
        .isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void inModeSeparateAListenerWhoseTransactionRollsBackWithoutThrowingIsNotRecordedSucceeded()
      throws Exception {
    send(template, "tx-rollback-only", "credit 7", "order-no", "RO-1");

    await().atMost(WAIT).until(() -> Switches.ledgerCalls.containsKey("RO-1"));
    DedupRecord settled =
        await()
            .atMost(WAIT)
            .until(
                () -> store.find(DedupKey.of("rollback-only", "RO-1")).orElseThrow(),
                record -> record.status() != DedupStatus.PROCESSING);
    assertThat(effects("rollback-only", "RO-1"))
        .as("the listener's write, rolled back with its transaction")
        .isZero();
    assertThat(settled.status())
        .as("the key of the call whose transaction rolled back (%s)", settled)
        .isEqualTo(DedupStatus.FAILED);
    assertThat(settled.lastError()).hasValueSatisfying(e -> assertThat(e).contains("rolled back"));

    // A later copy of the key (a producer's retry) applies it: it is not skipped as a duplicate.
    send(template, "tx-rollback-only", "credit 7", "order-no", "RO-1");
    await().atMost(WAIT).until(() -> effects("rollback-only", "RO-1") == 1);
    assertThat(Switches.ledgerCalls.get("RO-1")).hasValue(2);
  }

  @Test
  void inModeSeparateAnAfterCommitHookThatThrowsInTheContainersTransactionStillSettlesTheKey()
      throws Exception {
    send(template, "tx-after-commit", "ship 3", "order-no", "AC-1");

    await().atMost(WAIT).until(() -> Switches.hookFailures.get() == 1);
    assertThat(effects("after-commit", "AC-1")).as("the effect, committed").isEqualTo(1);
    await()
        .atMost(Duration.ofSeconds(15))
        .untilAsserted(
            () ->
                assertThat(store.find(DedupKey.of("after-commit", "AC-1")).orElseThrow().status())
                    .as("the key of the record whose transaction committed")
                    .isEqualTo(DedupStatus.SUCCESS));
    await().atMost(WAIT).until(() -> outcomes("after-commit", "duplicate") >= 1);
    assertThat(effects("after-commit", "AC-1")).as("applied once").isEqualTo(1);
    assertThat(Switches.ledgerCalls.get("AC-1")).hasValue(1);
  }

  @Test
  void inModeSeparateAnAfterCommitHookThatThrowsInTheListenersTransactionIsNotAppliedTwice()
      throws Exception {
    send(template, "tx-after-commit-own", "ship 4", "order-no", "ACO-1");

    await().atMost(WAIT).until(() -> Switches.ownTransactionHookFailures.get() == 1);
    // The error handler's retry of the failure the hook threw: a duplicate, or a second call.
    await()
        .atMost(WAIT)
        .until(
            () ->
                outcomes("after-commit-own", "duplicate") >= 1
                    || Switches.ledgerCalls.get("ACO-1").get() >= 2);
    assertThat(effects("after-commit-own", "ACO-1"))
        .as("the effect committed by the call whose afterCommit hook threw, then the retry")
        .isEqualTo(1);
    assertThat(Switches.ledgerCalls.get("ACO-1")).hasValue(1);
    await()
        .atMost(WAIT)
        .until(
            () -> store.find(DedupKey.of("after-commit-own", "ACO-1")).orElseThrow().status(),
            status -> status == DedupStatus.SUCCESS);
  }

  @Test
  void transactionalModeInAReadOnlyTransactionHoldsTheRecordNamingTheListener() throws Exception {
    send(template, "tx-read-only", "anything", "order-no", "RO-TX-1");

    // Held and tried again (never applied, never skipped) until it is fixed.
    await().atMost(WAIT).until(() -> failuresOf("tx-read-only-0@0").size() >= 2);
    assertThat(failuresOf("tx-read-only-0@0").get(0))
        .contains(DedupConfigurationException.class.getName())
        .contains("TransactionalModeIntegrationTest$TxListeners#readOnly")
        .contains("read-only");
    assertThat(Switches.ledgerCalls).doesNotContainKey("RO-TX-1");
    assertThat(store.find(DedupKey.of("read-only", "RO-TX-1"))).isEmpty();
  }

  private static List<String> failuresOf(String record) {
    return Switches.failures.stream().filter(failure -> failure.contains(record)).toList();
  }

  private int effects(String listener, String bizKey) {
    return SpringTestEnvironment.effects(jdbc, listener, bizKey);
  }

  private double outcomes(String bizType, String outcome) {
    return SpringTestEnvironment.outcomes(registry, bizType, outcome);
  }

  static final class Switches {
    static final Map<String, AtomicInteger> ledgerCalls = new ConcurrentHashMap<>();
    static final CountDownLatch secondAttemptStarted = new CountDownLatch(1);
    static final CountDownLatch releaseSecondAttempt = new CountDownLatch(1);
    static final CyclicBarrier bothCopiesArrived = new CyclicBarrier(2);
    static final List<String> failures = new CopyOnWriteArrayList<>();
    static final AtomicInteger hookFailures = new AtomicInteger();
    static final AtomicInteger ownTransactionHookFailures = new AtomicInteger();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    SimpleMeterRegistry meterRegistry() {
      return new SimpleMeterRegistry();
    }

    /**
     * The application's own record interceptor: consumer-dedup composes with it. It records
     * listener failures, and lines up the two concurrent copies.
     */
    @Bean
    RecordInterceptor<Object, Object> applicationInterceptor() {
      return new RecordInterceptor<>() {
        @Override
        public ConsumerRecord<Object, Object> intercept(
            ConsumerRecord<Object, Object> record, Consumer<Object, Object> consumer) {
          if (record.topic().equals("tx-concurrent")) {
            try {
              Switches.bothCopiesArrived.await(30, TimeUnit.SECONDS);
            } catch (Exception e) {
              throw new IllegalStateException("The two copies did not meet", e);
            }
          }
          return record;
        }

        @Override
        public void failure(
            ConsumerRecord<Object, Object> record,
            Exception exception,
            Consumer<Object, Object> consumer) {
          Switches.failures.add(SpringTestEnvironment.causes(exception));
        }
      };
    }

    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> transactedFactory(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        PlatformTransactionManager transactionManager) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setTransactionManager(transactionManager);
      return factory;
    }

    @Bean
    TxListeners txListeners(JdbcTemplate jdbc) {
      return new TxListeners(jdbc);
    }
  }

  static class TxListeners {
    final JdbcTemplate jdbc;

    TxListeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    void effect(String listener, String bizKey, String payload) {
      SpringTestEnvironment.effect(jdbc, listener, bizKey, payload);
    }

    @Transactional
    @Idempotent(bizType = "ledger", header = "order-no")
    @KafkaListener(id = "tx-ledger", topics = "tx-ledger")
    public void onLedger(
        String payload,
        @org.springframework.messaging.handler.annotation.Header("order-no") String orderNo)
        throws InterruptedException {
      int call =
          Switches.ledgerCalls.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      if (call == 2) {
        Switches.secondAttemptStarted.countDown();
        if (!Switches.releaseSecondAttempt.await(30, TimeUnit.SECONDS)) {
          throw new IllegalStateException("the test never released the second attempt");
        }
      }
      effect("ledger", orderNo, payload);
      if (call == 1) {
        throw new IllegalStateException("ledger posting failed after the business write");
      }
    }

    @Idempotent(bizType = "transfer", header = "order-no")
    @KafkaListener(
        id = "tx-copy-a",
        topics = "tx-concurrent",
        containerFactory = "transactedFactory")
    public void onTransferA(ConsumerRecord<String, String> record) throws InterruptedException {
      transfer(record);
    }

    @Idempotent(bizType = "transfer", header = "order-no")
    @KafkaListener(
        id = "tx-copy-b",
        topics = "tx-concurrent",
        containerFactory = "transactedFactory")
    public void onTransferB(ConsumerRecord<String, String> record) throws InterruptedException {
      transfer(record);
    }

    private void transfer(ConsumerRecord<String, String> record) throws InterruptedException {
      effect("transfer", SpringTestEnvironment.header(record, "order-no"), record.value());
      // Hold the transaction open, so the other copy's claim has to wait for it.
      Thread.sleep(500);
    }

    @Transactional
    @Idempotent(bizType = "missing", header = "order-no")
    @KafkaListener(id = "tx-missing", topics = "tx-missing")
    public void onMissing(ConsumerRecord<String, String> record) {
      effect("missing", SpringTestEnvironment.header(record, "order-no"), record.value());
    }

    /**
     * Mode SEPARATE in a database transaction: the first attempt books the order twice, which the
     * deferred unique constraint refuses only at commit, after the listener returned.
     */
    @Transactional
    @Idempotent(bizType = "booking", header = "order-no", mode = DedupMode.SEPARATE)
    @KafkaListener(id = "tx-separate-commit", topics = "tx-separate-commit")
    public void book(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      int call =
          Switches.ledgerCalls.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      for (int i = 0; i < (call == 1 ? 2 : 1); i++) {
        jdbc.update("INSERT INTO bookings (order_no) VALUES (?)", orderNo);
      }
    }

    /**
     * The first attempt of each order writes its effect, then an audit row it takes as optional,
     * catching the statement's failure: PostgreSQL has aborted the transaction by then.
     */
    @Transactional
    @Idempotent(bizType = "swallows", header = "order-no")
    @KafkaListener(id = "tx-swallows", topics = "tx-swallows")
    public void swallowing(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      int call =
          Switches.ledgerCalls.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      effect("swallows", orderNo, record.value());
      if (call == 1 && orderNo.equals("SW-1")) {
        try {
          jdbc.update("INSERT INTO no_such_audit_table VALUES (1)");
        } catch (org.springframework.dao.DataAccessException optional) {
          // the audit row is optional
        }
      }
    }

    /**
     * Throws a checked exception at its first call for CK-1: {@code @Transactional} commits on
     * those unless told otherwise, its effect included.
     */
    @Transactional
    @Idempotent(bizType = "checked", header = "order-no")
    @KafkaListener(id = "tx-checked", topics = "tx-checked")
    public void checked(ConsumerRecord<String, String> record) throws java.io.IOException {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      int call =
          Switches.ledgerCalls.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      effect("checked", orderNo, record.value());
      if (call == 1 && orderNo.equals("CK-1")) {
        throw new java.io.IOException("the statement file could not be written");
      }
    }

    /**
     * Mode SEPARATE: the first call for each order writes its effect, then marks its transaction
     * rollback-only and returns normally, so that {@code @Transactional} rolls it back without an
     * exception.
     */
    @Transactional
    @Idempotent(bizType = "rollback-only", header = "order-no", mode = DedupMode.SEPARATE)
    @KafkaListener(id = "tx-rollback-only", topics = "tx-rollback-only")
    public void rollingBack(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      int call =
          Switches.ledgerCalls.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      effect("rollback-only", orderNo, record.value());
      if (call == 1) {
        TransactionAspectSupport.currentTransactionStatus().setRollbackOnly();
      }
    }

    /**
     * Mode SEPARATE in the container's database transaction: the first call registers a hook of its
     * own after the commit (a notification, say), which throws.
     */
    @Idempotent(bizType = "after-commit", header = "order-no", mode = DedupMode.SEPARATE)
    @KafkaListener(
        id = "tx-after-commit",
        topics = "tx-after-commit",
        containerFactory = "transactedFactory")
    public void withAnAfterCommitHook(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      int call =
          Switches.ledgerCalls.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      effect("after-commit", orderNo, record.value());
      if (call == 1) {
        TransactionSynchronizationManager.registerSynchronization(
            new TransactionSynchronization() {
              @Override
              public void afterCommit() {
                Switches.hookFailures.incrementAndGet();
                throw new IllegalStateException("the notification after the commit failed");
              }
            });
      }
    }

    /**
     * Mode SEPARATE in a transaction of its own: the first call registers a hook after the commit,
     * which throws; Spring passes that on to the caller of the committed method.
     */
    @Transactional
    @Idempotent(bizType = "after-commit-own", header = "order-no", mode = DedupMode.SEPARATE)
    @KafkaListener(id = "tx-after-commit-own", topics = "tx-after-commit-own")
    public void withAnAfterCommitHookOfItsTransaction(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      int call =
          Switches.ledgerCalls.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      effect("after-commit-own", orderNo, record.value());
      if (call == 1) {
        TransactionSynchronizationManager.registerSynchronization(
            new TransactionSynchronization() {
              @Override
              public void afterCommit() {
                Switches.ownTransactionHookFailures.incrementAndGet();
                throw new IllegalStateException("the notification after the commit failed");
              }
            });
      }
    }

    /** Read-only, as a class-level {@code @Transactional(readOnly = true)} makes every method. */
    @Transactional(readOnly = true)
    @Idempotent(bizType = "read-only", header = "order-no")
    @KafkaListener(id = "tx-read-only", topics = "tx-read-only")
    public void readOnly(ConsumerRecord<String, String> record) {
      Switches.ledgerCalls
          .computeIfAbsent(
              SpringTestEnvironment.header(record, "order-no"), k -> new AtomicInteger())
          .incrementAndGet();
    }

    @Idempotent(bizType = "none", header = "order-no")
    @KafkaListener(id = "tx-none", topics = "tx-none")
    public void withoutTransaction(ConsumerRecord<String, String> record) {
      effect("none", SpringTestEnvironment.header(record, "order-no"), record.value());
    }
  }
}
