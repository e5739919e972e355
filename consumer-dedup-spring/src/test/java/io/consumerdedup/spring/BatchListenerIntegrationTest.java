package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.deadLetterReason;
import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupKeyMissingException;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
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
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.BatchListenerFailedException;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.kafka.test.utils.ContainerTestUtils;
import org.springframework.messaging.Message;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.transaction.interceptor.TransactionAspectSupport;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * {@code @Idempotent} batch listeners in a Spring Boot application with the application's own
 * {@code DefaultErrorHandler} and a dead-letter topic, a real PostgreSQL and an in-JVM KRaft
 * broker. Each test stops its listener's container, sends a batch, and starts it again, so the
 * batch arrives in one poll.
 */
@SpringBootTest(
    classes = BatchListenerIntegrationTest.App.class,
    properties = {
      "consumer-dedup.hold.initial-backoff=200ms",
      "consumer-dedup.hold.max-backoff=400ms"
    })
@DirtiesContext
class BatchListenerIntegrationTest {
  static final Duration WAIT = Duration.ofSeconds(30);

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "spring_batch",
        "bt-dups",
        "bt-fail",
        "bt-fail-dlt",
        "bt-message",
        "bt-manual",
        "bt-keyless",
        "bt-txack-thread",
        "bt-keyless-dlt",
        "bt-plain",
        "bt-held",
        "bt-records",
        "bt-nack",
        "bt-progress",
        "bt-ackfail",
        "bt-rollback-only",
        "bt-after-commit",
        "bt-txack",
        "bt-tx-fail",
        "bt-tx-nack");
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired MeterRegistry registry;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void duplicatesOfEarlierKeysAndWithinTheBatchAreAppliedOnceAndCommittedToTheEnd()
      throws Exception {
    send(template, "bt-dups", "first", "order-no", "D-1");
    send(template, "bt-dups", "first", "order-no", "D-2");
    await().atMost(WAIT).until(() -> committed("bt-dups") == 2);

    inOneBatch(
        "bt-dups",
        () -> {
          send(template, "bt-dups", "again", "order-no", "D-1");
          send(template, "bt-dups", "new", "order-no", "D-3");
          send(template, "bt-dups", "new again", "order-no", "D-3");
          send(template, "bt-dups", "again", "order-no", "D-2");
          send(template, "bt-dups", "new", "order-no", "D-4");
          send(template, "bt-dups", "new a third time", "order-no", "D-3");
        });

    await().atMost(WAIT).until(() -> committed("bt-dups") == 8);
    for (String key : List.of("D-1", "D-2", "D-3", "D-4")) {
      assertThat(effects("dups", key)).as(key).isEqualTo(1);
      DedupRecord record = store.find(DedupKey.of("dups", key)).orElseThrow();
      assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
      assertThat(record.attempts()).isEqualTo(1);
    }
    // The batch of six reached the method as the two new keys only, each once.
    assertThat(Switches.batches.get("bt-dups")).contains(List.of("D-3", "D-4"));
    assertThat(outcomes("dups", "duplicate")).isEqualTo(2);
  }

  @Test
  void failureAtOneRecordRetriesItAloneAndAppliesEveryRecordOnce() throws Exception {
    send(template, "bt-fail", "applied before", "order-no", "F-0");
    await().atMost(WAIT).until(() -> committed("bt-fail") == 1);

    inOneBatch(
        "bt-fail",
        () -> {
          send(template, "bt-fail", "a", "order-no", "F-1");
          send(template, "bt-fail", "duplicate", "order-no", "F-0");
          send(template, "bt-fail", "fails once", "order-no", "F-2");
          send(template, "bt-fail", "c", "order-no", "F-3");
          send(template, "bt-fail", "d", "order-no", "F-4");
        });

    await().atMost(WAIT).until(() -> committed("bt-fail") == 6);
    for (String key : List.of("F-0", "F-1", "F-2", "F-3", "F-4")) {
      assertThat(effects("fail", key)).as(key).isEqualTo(1);
      assertThat(store.find(DedupKey.of("fail", key)).orElseThrow().status())
          .isEqualTo(DedupStatus.SUCCESS);
    }
    // F-2 was at index 1 of the list the method got, index 2 of the container's batch: the
    // record before it was not given again, it was retried, those after it were released.
    assertThat(Switches.calls.get("F-1").get()).isEqualTo(1);
    assertThat(Switches.calls.get("F-2").get()).isEqualTo(2);
    assertThat(store.find(DedupKey.of("fail", "F-2")).orElseThrow().attempts()).isEqualTo(2);
    assertThat(store.find(DedupKey.of("fail", "F-3")).orElseThrow().attempts()).isEqualTo(1);
    assertThat(store.find(DedupKey.of("fail", "F-4")).orElseThrow().attempts()).isEqualTo(1);
    assertThat(Switches.batches.get("bt-fail"))
        .contains(List.of("F-1", "F-2", "F-3", "F-4"), List.of("F-2", "F-3", "F-4"));
    assertThat(readTopic("bt-fail-dlt", 1, Duration.ofSeconds(2))).isEmpty();
  }

  @Test
  void plainExceptionLeavesTheClaimedRecordsFailedAndTheWholeBatchIsRetried() throws Exception {
    inOneBatch(
        "bt-plain",
        () -> {
          send(template, "bt-plain", "a", "order-no", "P-1");
          send(template, "bt-plain", "b", "order-no", "P-2");
        });

    await().atMost(WAIT).until(() -> committed("bt-plain") == 2);
    for (String key : List.of("P-1", "P-2")) {
      assertThat(effects("plain", key)).as(key).isEqualTo(1);
      DedupRecord record = store.find(DedupKey.of("plain", key)).orElseThrow();
      assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
      assertThat(record.attempts())
          .as("the failed attempt and the one that succeeded")
          .isEqualTo(2);
    }
  }

  @Test
  void messageListenerGetsOnlyTheMessagesOfNewKeys() throws Exception {
    send(template, "bt-message", "first", "order-no", "M-1");
    await().atMost(WAIT).until(() -> committed("bt-message") == 1);

    inOneBatch(
        "bt-message",
        () -> {
          send(template, "bt-message", "again", "order-no", "M-1");
          send(template, "bt-message", "second", "order-no", "M-2");
          send(template, "bt-message", "second again", "order-no", "M-2");
        });

    await().atMost(WAIT).until(() -> committed("bt-message") == 4);
    assertThat(effects("message", "M-1")).isEqualTo(1);
    assertThat(effects("message", "M-2")).isEqualTo(1);
    assertThat(
            jdbc.queryForObject(
                "SELECT payload FROM effects WHERE listener = 'message' AND biz_key = 'M-2'",
                String.class))
        .isEqualTo("second");
    assertThat(Switches.batches.get("bt-message")).contains(List.of("M-2"));
  }

  @Test
  void manualAckBatchOfOnlyDuplicatesIsCommitted() throws Exception {
    inOneBatch(
        "bt-manual",
        () -> {
          send(template, "bt-manual", "a", "order-no", "Q-1");
          send(template, "bt-manual", "b", "order-no", "Q-2");
        });
    await().atMost(WAIT).until(() -> committed("bt-manual") == 2);
    int calls = Switches.batches.get("bt-manual").size();

    inOneBatch(
        "bt-manual",
        () -> {
          send(template, "bt-manual", "a", "order-no", "Q-1");
          send(template, "bt-manual", "b", "order-no", "Q-2");
        });

    await().atMost(WAIT).until(() -> committed("bt-manual") == 4);
    assertThat(Switches.batches.get("bt-manual")).as("not invoked for duplicates").hasSize(calls);
    assertThat(effects("manual", "Q-1")).isEqualTo(1);
    assertThat(effects("manual", "Q-2")).isEqualTo(1);
  }

  @Test
  void consumerRecordsListenerGetsOnlyTheRecordsOfNewKeys() throws Exception {
    send(template, "bt-records", "first", "order-no", "R-1");
    await().atMost(WAIT).until(() -> committed("bt-records") == 1);

    inOneBatch(
        "bt-records",
        () -> {
          send(template, "bt-records", "again", "order-no", "R-1");
          send(template, "bt-records", "second", "order-no", "R-2");
        });

    await().atMost(WAIT).until(() -> committed("bt-records") == 3);
    assertThat(effects("records", "R-1")).isEqualTo(1);
    assertThat(effects("records", "R-2")).isEqualTo(1);
    assertThat(Switches.batches.get("bt-records")).containsExactly(List.of("R-1"), List.of("R-2"));
  }

  @Test
  void nackAtAnIndexOfTheFilteredListRedeliversFromThatRecordOfTheBatch() throws Exception {
    send(template, "bt-nack", "first", "order-no", "N-0");
    await().atMost(WAIT).until(() -> committed("bt-nack") == 1);

    inOneBatch(
        "bt-nack",
        () -> {
          send(template, "bt-nack", "duplicate", "order-no", "N-0");
          send(template, "bt-nack", "a", "order-no", "N-1");
          send(template, "bt-nack", "nack me once", "order-no", "N-2");
          send(template, "bt-nack", "b", "order-no", "N-3");
        });

    await().atMost(WAIT).until(() -> committed("bt-nack") == 5);
    for (String key : List.of("N-0", "N-1", "N-2", "N-3")) {
      assertThat(effects("nack", key)).as(key).isEqualTo(1);
      assertThat(store.find(DedupKey.of("nack", key)).orElseThrow().status())
          .isEqualTo(DedupStatus.SUCCESS);
    }
    // N-2 was at index 1 of the list the method got, index 2 of the container's batch.
    assertThat(Switches.batches.get("bt-nack"))
        .containsExactly(List.of("N-0"), List.of("N-1", "N-2", "N-3"), List.of("N-2", "N-3"));
    assertThat(store.find(DedupKey.of("nack", "N-1")).orElseThrow().attempts()).isEqualTo(1);
    assertThat(store.find(DedupKey.of("nack", "N-2")).orElseThrow().attempts()).isEqualTo(2);
    // N-3 came after the nack: never tried, it has no failed attempt to count (counted, a record
    // nacked a few times would have the records behind it dead-lettered as out of attempts).
    assertThat(store.find(DedupKey.of("nack", "N-3")).orElseThrow().attempts())
        .as("attempts of the record after the nacked one")
        .isEqualTo(1);
  }

  /**
   * A batch listener that acknowledges each record as it goes: the SUCCESS of what it acknowledged
   * is written at once, so a process dying later in the batch would run only the records after it
   * again (the window of a batch listener is otherwise the whole batch so far).
   */
  @Test
  void recordsAcknowledgedMidBatchAreSuccessBeforeTheBatchEnds() throws Exception {
    inOneBatch(
        "bt-progress",
        () -> {
          send(template, "bt-progress", "a", "order-no", "P-1");
          send(template, "bt-progress", "b", "order-no", "P-2");
          send(template, "bt-progress", "c", "order-no", "P-3");
        });

    // The listener acknowledged P-1 and P-2, and waits before P-3.
    assertThat(Switches.progressWaiting.await(WAIT.toSeconds(), TimeUnit.SECONDS)).isTrue();
    await().atMost(WAIT).until(() -> status("progress", "P-2") == DedupStatus.SUCCESS);
    assertThat(status("progress", "P-1")).isEqualTo(DedupStatus.SUCCESS);
    assertThat(status("progress", "P-3")).isEqualTo(DedupStatus.PROCESSING);
    assertThat(committed("bt-progress")).as("no offset before the batch ends").isLessThan(1);

    Switches.progressGo.countDown();
    await().atMost(WAIT).until(() -> committed("bt-progress") == 3);
    for (String key : List.of("P-1", "P-2", "P-3")) {
      assertThat(effects("progress", key)).as(key).isEqualTo(1);
      assertThat(status("progress", key)).isEqualTo(DedupStatus.SUCCESS);
    }
    assertThat(Switches.batches.get("bt-progress")).containsExactly(List.of("P-1", "P-2", "P-3"));
  }

  /**
   * A record the method acknowledged is done by its word: reported failed afterwards, it is not
   * applied again; the redelivery the failure asks for finds it a duplicate.
   */
  @Test
  void aRecordAcknowledgedThenReportedFailedKeepsItsSuccessAndIsNotAppliedAgain() throws Exception {
    inOneBatch(
        "bt-ackfail",
        () -> {
          send(template, "bt-ackfail", "a", "order-no", "A-1");
          send(template, "bt-ackfail", "reported failed after its ack", "order-no", "A-2");
          send(template, "bt-ackfail", "c", "order-no", "A-3");
        });

    await().atMost(WAIT).until(() -> committed("bt-ackfail") == 3);
    for (String key : List.of("A-1", "A-2", "A-3")) {
      assertThat(effects("ackfail", key)).as(key).isEqualTo(1);
      assertThat(status("ackfail", key)).isEqualTo(DedupStatus.SUCCESS);
    }
    assertThat(Switches.calls.get("A-2").get()).as("A-2 given to the method once").isEqualTo(1);
    assertThat(store.find(DedupKey.of("ackfail", "A-2")).orElseThrow().attempts()).isEqualTo(1);
    assertThat(Switches.batches.get("bt-ackfail"))
        .contains(List.of("A-1", "A-2", "A-3"), List.of("A-3"));
  }

  /**
   * A {@code @Transactional} batch listener acknowledges each record after its effect, then fails
   * at the third, and its transaction rolls back the effects of all three: the acknowledged records
   * are not done, and the error handler's retry applies them. Their SUCCESS written at the
   * acknowledgment, before the rollback, stood: the retry skipped them as duplicates and they were
   * never applied.
   */
  @Test
  void recordsAcknowledgedInATransactionThatRollsBackAreAppliedByTheRetry() throws Exception {
    inOneBatch(
        "bt-txack",
        () -> {
          send(template, "bt-txack", "a", "order-no", "T-1");
          send(template, "bt-txack", "b", "order-no", "T-2");
          send(template, "bt-txack", "fails once, after the acks", "order-no", "T-3");
        });

    await().atMost(WAIT).until(() -> committed("bt-txack") == 3);
    assertThat(Switches.calls.get("T-3").get())
        .as("the first call failed and its transaction rolled back")
        .isEqualTo(2);
    for (String key : List.of("T-1", "T-2", "T-3")) {
      assertThat(effects("txack", key))
          .as("%s applied (the method was given %s)", key, Switches.batches.get("bt-txack"))
          .isEqualTo(1);
      assertThat(status("txack", key)).as(key).isEqualTo(DedupStatus.SUCCESS);
    }
  }

  /**
   * The same, the acknowledgments made from another thread while the method runs (a send's
   * callback, say): the transaction they were made under is the method's, still open.
   */
  @Test
  void recordsAcknowledgedFromAnotherThreadInATransactionThatRollsBackAreAppliedByTheRetry()
      throws Exception {
    inOneBatch(
        "bt-txack-thread",
        () -> {
          send(template, "bt-txack-thread", "a", "order-no", "TT-1");
          send(template, "bt-txack-thread", "b", "order-no", "TT-2");
          send(template, "bt-txack-thread", "fails once, after the acks", "order-no", "TT-3");
        });

    await().atMost(WAIT).until(() -> committed("bt-txack-thread") == 3);
    for (String key : List.of("TT-1", "TT-2", "TT-3")) {
      assertThat(effects("txackthread", key))
          .as("%s applied (the method was given %s)", key, Switches.batches.get("bt-txack-thread"))
          .isEqualTo(1);
      assertThat(status("txackthread", key)).as(key).isEqualTo(DedupStatus.SUCCESS);
    }
  }

  /**
   * A {@code @Transactional} batch listener fails at its third record with a {@code
   * BatchListenerFailedException}: its transaction rolls back the effects of the two records before
   * it too. Those records are not done, whatever the exception's index says: the retry must apply
   * them.
   */
  @Test
  void recordsBeforeTheFailedOneOfATransactionThatRollsBackAreAppliedByTheRetry() throws Exception {
    inOneBatch(
        "bt-tx-fail",
        () -> {
          send(template, "bt-tx-fail", "a", "order-no", "TF-1");
          send(template, "bt-tx-fail", "b", "order-no", "TF-2");
          send(template, "bt-tx-fail", "fails once", "order-no", "TF-3");
        });

    await().atMost(WAIT).until(() -> committed("bt-tx-fail") == 3);
    for (String key : List.of("TF-1", "TF-2", "TF-3")) {
      assertThat(effects("txfail", key))
          .as("%s applied (the method was given %s)", key, Switches.batches.get("bt-tx-fail"))
          .isEqualTo(1);
      assertThat(status("txfail", key)).as(key).isEqualTo(DedupStatus.SUCCESS);
    }
  }

  /**
   * The same with a nack: the listener marks its transaction rollback-only and nacks at its third
   * record. The records before it are undone too: the redelivery must apply them.
   */
  @Test
  void recordsBeforeTheNackedOneOfATransactionThatRollsBackAreAppliedByTheRedelivery()
      throws Exception {
    inOneBatch(
        "bt-tx-nack",
        () -> {
          send(template, "bt-tx-nack", "a", "order-no", "TN-1");
          send(template, "bt-tx-nack", "b", "order-no", "TN-2");
          send(template, "bt-tx-nack", "fails once", "order-no", "TN-3");
        });

    await().atMost(WAIT).until(() -> committed("bt-tx-nack") == 3);
    for (String key : List.of("TN-1", "TN-2", "TN-3")) {
      assertThat(effects("txnack", key))
          .as("%s applied (the method was given %s)", key, Switches.batches.get("bt-tx-nack"))
          .isEqualTo(1);
      assertThat(status("txnack", key)).as(key).isEqualTo(DedupStatus.SUCCESS);
    }
  }

  private DedupStatus status(String bizType, String key) {
    return store.find(DedupKey.of(bizType, key)).orElseThrow().status();
  }

  @Test
  void keylessRecordIsDeadLetteredOnceAndTheOthersAreApplied() throws Exception {
    inOneBatch(
        "bt-keyless",
        () -> {
          send(template, "bt-keyless", "before", "order-no", "K-1");
          send(template, "bt-keyless", "without key");
          send(template, "bt-keyless", "after", "order-no", "K-2");
        });

    await().atMost(WAIT).until(() -> committed("bt-keyless") == 3);
    assertThat(effects("keyless", "K-1")).isEqualTo(1);
    assertThat(effects("keyless", "K-2")).isEqualTo(1);
    List<ConsumerRecord<String, String>> dead = readTopic("bt-keyless-dlt", 1, WAIT);
    assertThat(dead).extracting(ConsumerRecord::value).containsExactly("without key");
    assertThat(deadLetterReason(dead.get(0)))
        .contains(DedupKeyMissingException.class.getName())
        .contains("bt-keyless-0@1");
    // Refused once: a retry would have counted the missing key again.
    assertThat(outcomes("keyless", "missing_key")).isEqualTo(1);
    assertThat(readTopic("bt-keyless-dlt", 2, Duration.ofSeconds(2))).hasSize(1);
  }

  @Test
  void recordInProgressElsewhereStopsTheBatchThereAndWaitsInsteadOfBeingSkipped() throws Exception {
    IdempotentExecutor other = IdempotentExecutor.builder(store).ownerId("other-consumer").build();
    try {
      DedupClaim held = other.claim(DedupKey.of("held", "H-2"), null, "another consumer");
      inOneBatch(
          "bt-held",
          () -> {
            send(template, "bt-held", "a", "order-no", "H-1");
            send(template, "bt-held", "b", "order-no", "H-2");
            send(template, "bt-held", "c", "order-no", "H-3");
          });

      await().atMost(WAIT).until(() -> committed("bt-held") == 1);
      assertThat(effects("held", "H-1")).isEqualTo(1);
      // Many times the error handler's 3 retries of 50 ms: never skipped, nothing past it.
      Thread.sleep(3000);
      assertThat(committed("bt-held")).isEqualTo(1);
      assertThat(effects("held", "H-2")).isZero();
      assertThat(effects("held", "H-3")).isZero();
      assertThat(readTopic("bt-held-dlt", 1, Duration.ofMillis(500))).isEmpty();

      held.fail(new IllegalStateException("the other consumer gave up"));
      await().atMost(WAIT).until(() -> committed("bt-held") == 3);
      assertThat(effects("held", "H-1")).isEqualTo(1);
      assertThat(effects("held", "H-2")).isEqualTo(1);
      assertThat(effects("held", "H-3")).isEqualTo(1);
      assertThat(store.find(DedupKey.of("held", "H-3")).orElseThrow().attempts())
          .as("released, not counted, while H-2 was held")
          .isEqualTo(1);
    } finally {
      other.close();
    }
  }

  @Test
  void aTransactionalBatchThatRollsBackWithoutThrowingIsNotRecordedSucceeded() throws Exception {
    send(template, "bt-rollback-only", "credit 2", "order-no", "RB-1");

    await().atMost(WAIT).until(() -> Switches.calls.containsKey("RB-1"));
    DedupRecord settled =
        await()
            .atMost(WAIT)
            .until(
                () -> store.find(DedupKey.of("rollback-only", "RB-1")).orElseThrow(),
                record -> record.status() != DedupStatus.PROCESSING);
    assertThat(effects("rollback-only", "RB-1"))
        .as("the batch's write, rolled back with its transaction")
        .isZero();
    assertThat(settled.status())
        .as("the key of the batch whose transaction rolled back (%s)", settled)
        .isEqualTo(DedupStatus.FAILED);

    // A later copy of the key (a producer's retry) applies it: it is not skipped as a duplicate.
    send(template, "bt-rollback-only", "credit 2", "order-no", "RB-1");
    await().atMost(WAIT).until(() -> effects("rollback-only", "RB-1") == 1);
    assertThat(Switches.calls.get("RB-1")).hasValue(2);
  }

  @Test
  void aTransactionalBatchWhoseAfterCommitHookThrowsIsNotAppliedAgainByTheRetry() throws Exception {
    send(template, "bt-after-commit", "ship 1", "order-no", "BAC-1");

    await().atMost(WAIT).until(() -> Switches.hookFailures.get() == 1);
    // The error handler's retry of the failure the hook threw: a duplicate, or a second call.
    await()
        .atMost(WAIT)
        .until(
            () ->
                outcomes("after-commit", "duplicate") >= 1
                    || Switches.calls.get("BAC-1").get() >= 2);
    assertThat(effects("after-commit", "BAC-1"))
        .as("the effect committed by the batch whose afterCommit hook threw, then the retry")
        .isEqualTo(1);
    assertThat(store.find(DedupKey.of("after-commit", "BAC-1")).orElseThrow().status())
        .isEqualTo(DedupStatus.SUCCESS);
  }

  /**
   * Sends {@code batch} while the listener of {@code topic} is stopped, then starts it: its new
   * consumer fetches them together (a paused one may still hand over a fetch already under way).
   */
  private void inOneBatch(String topic, ThrowingRunnable batch) throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(topic);
    ContainerTestUtils.waitForAssignment(container, 1);
    container.stop();
    batch.run();
    container.start();
  }

  interface ThrowingRunnable {
    void run() throws Exception;
  }

  /** The group's committed offset of partition 0 (the listener id is the topic and the group). */
  private long committed(String topic) throws Exception {
    return SpringTestEnvironment.committed(topic, topic, 0);
  }

  private int effects(String listener, String bizKey) {
    return SpringTestEnvironment.effects(jdbc, listener, bizKey);
  }

  private double outcomes(String bizType, String outcome) {
    return SpringTestEnvironment.outcomes(registry, bizType, outcome);
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    SimpleMeterRegistry meterRegistry() {
      return new SimpleMeterRegistry();
    }

    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<String, String> template) {
      return SpringTestEnvironment.deadLettering(template, 50, 3);
    }

    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> manualAckFactory(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setAckMode(ContainerProperties.AckMode.MANUAL);
      return factory;
    }

    @Bean
    Listeners listeners(JdbcTemplate jdbc) {
      return new Listeners(jdbc);
    }
  }

  /** State the test reads; not a proxied bean, so fields are the real ones. */
  static final class Switches {
    /** Per topic, the keys of each list a listener was given. */
    static final Map<String, List<List<String>>> batches = new ConcurrentHashMap<>();

    /** Per key, how often a listener was given its record. */
    static final Map<String, AtomicInteger> calls = new ConcurrentHashMap<>();

    /** bt-progress: the listener waits before its third record until the test says go. */
    static final CountDownLatch progressWaiting = new CountDownLatch(1);

    static final CountDownLatch progressGo = new CountDownLatch(1);

    /** bt-after-commit: how often the hook after its first batch's commit threw. */
    static final AtomicInteger hookFailures = new AtomicInteger();

    static void seen(String topic, List<String> keys) {
      batches.computeIfAbsent(topic, t -> new CopyOnWriteArrayList<>()).add(keys);
      keys.forEach(key -> calls.computeIfAbsent(key, k -> new AtomicInteger()).incrementAndGet());
    }
  }

  static class Listeners {
    final JdbcTemplate jdbc;

    Listeners(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    void effect(String listener, String bizKey, String payload) {
      SpringTestEnvironment.effect(jdbc, listener, bizKey, payload);
    }

    private static List<String> keys(List<ConsumerRecord<String, String>> records) {
      return records.stream().map(record -> header(record, "order-no")).toList();
    }

    /**
     * The first batch writes its effects, then marks its transaction rollback-only and returns, so
     * that {@code @Transactional} rolls it back without an exception.
     */
    @Transactional
    @Idempotent(bizType = "rollback-only", header = "order-no")
    @KafkaListener(id = "bt-rollback-only", topics = "bt-rollback-only", batch = "true")
    public void onRollbackOnly(List<ConsumerRecord<String, String>> records) {
      Switches.seen("bt-rollback-only", keys(records));
      records.forEach(r -> effect("rollback-only", header(r, "order-no"), r.value()));
      if (Switches.calls.get("RB-1").get() == 1) {
        TransactionAspectSupport.currentTransactionStatus().setRollbackOnly();
      }
    }

    /** The first batch registers a hook after its commit (a notification, say), which throws. */
    @Transactional
    @Idempotent(bizType = "after-commit", header = "order-no")
    @KafkaListener(id = "bt-after-commit", topics = "bt-after-commit", batch = "true")
    public void onAfterCommit(List<ConsumerRecord<String, String>> records) {
      Switches.seen("bt-after-commit", keys(records));
      records.forEach(r -> effect("after-commit", header(r, "order-no"), r.value()));
      if (Switches.calls.get("BAC-1").get() == 1) {
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

    @Idempotent(bizType = "dups", header = "order-no")
    @KafkaListener(id = "bt-dups", topics = "bt-dups", batch = "true")
    public void onDups(List<ConsumerRecord<String, String>> records) {
      Switches.seen("bt-dups", keys(records));
      records.forEach(r -> effect("dups", header(r, "order-no"), r.value()));
    }

    @Idempotent(bizType = "fail", header = "order-no")
    @KafkaListener(id = "bt-fail", topics = "bt-fail", batch = "true")
    public void onFail(List<ConsumerRecord<String, String>> records) {
      Switches.seen("bt-fail", keys(records));
      for (int i = 0; i < records.size(); i++) {
        ConsumerRecord<String, String> record = records.get(i);
        String key = header(record, "order-no");
        if (record.value().equals("fails once") && Switches.calls.get(key).get() == 1) {
          throw new BatchListenerFailedException(
              "downstream timeout", new IllegalStateException("downstream timeout"), i);
        }
        effect("fail", key, record.value());
      }
    }

    @Idempotent(bizType = "plain", header = "order-no")
    @KafkaListener(id = "bt-plain", topics = "bt-plain", batch = "true")
    public void onPlain(List<ConsumerRecord<String, String>> records) {
      Switches.seen("bt-plain", keys(records));
      if (Switches.calls.get("P-1").get() == 1) {
        throw new IllegalStateException("the whole batch failed");
      }
      records.forEach(r -> effect("plain", header(r, "order-no"), r.value()));
    }

    @Idempotent(bizType = "message", key = "#headers['order-no']")
    @KafkaListener(id = "bt-message", topics = "bt-message", batch = "true")
    public void onMessages(List<Message<String>> messages) {
      Switches.seen(
          "bt-message",
          messages.stream()
              .map(
                  m -> {
                    Object key = m.getHeaders().get("order-no");
                    return key instanceof byte[] bytes ? new String(bytes) : String.valueOf(key);
                  })
              .toList());
      for (Message<String> message : messages) {
        Object key = message.getHeaders().get("order-no");
        effect(
            "message",
            key instanceof byte[] bytes ? new String(bytes) : String.valueOf(key),
            message.getPayload());
      }
    }

    @Idempotent(bizType = "manual", header = "order-no")
    @KafkaListener(
        id = "bt-manual",
        topics = "bt-manual",
        batch = "true",
        containerFactory = "manualAckFactory")
    public void onManual(List<ConsumerRecord<String, String>> records, Acknowledgment ack) {
      Switches.seen("bt-manual", keys(records));
      records.forEach(r -> effect("manual", header(r, "order-no"), r.value()));
      ack.acknowledge();
    }

    @Idempotent(bizType = "held", header = "order-no")
    @KafkaListener(id = "bt-held", topics = "bt-held", batch = "true")
    public void onHeld(List<ConsumerRecord<String, String>> records) {
      Switches.seen("bt-held", keys(records));
      records.forEach(r -> effect("held", header(r, "order-no"), r.value()));
    }

    @Idempotent(bizType = "records", header = "order-no")
    @KafkaListener(id = "bt-records", topics = "bt-records", batch = "true")
    public void onConsumerRecords(ConsumerRecords<String, String> records) {
      List<ConsumerRecord<String, String>> list = new ArrayList<>();
      records.forEach(list::add);
      Switches.seen("bt-records", keys(list));
      list.forEach(r -> effect("records", header(r, "order-no"), r.value()));
    }

    @Idempotent(bizType = "nack", header = "order-no")
    @KafkaListener(
        id = "bt-nack",
        topics = "bt-nack",
        batch = "true",
        containerFactory = "manualAckFactory")
    public void onNack(List<ConsumerRecord<String, String>> records, Acknowledgment ack) {
      Switches.seen("bt-nack", keys(records));
      for (int i = 0; i < records.size(); i++) {
        ConsumerRecord<String, String> record = records.get(i);
        String key = header(record, "order-no");
        if (record.value().equals("nack me once") && Switches.calls.get(key).get() == 1) {
          ack.nack(i, Duration.ofMillis(100));
          return;
        }
        effect("nack", key, record.value());
      }
      ack.acknowledge();
    }

    @Idempotent(bizType = "progress", header = "order-no")
    @KafkaListener(
        id = "bt-progress",
        topics = "bt-progress",
        batch = "true",
        containerFactory = "manualAckFactory")
    public void onProgress(List<ConsumerRecord<String, String>> records, Acknowledgment ack)
        throws InterruptedException {
      Switches.seen("bt-progress", keys(records));
      for (int i = 0; i < records.size(); i++) {
        if (i == 2) {
          Switches.progressWaiting.countDown();
          Switches.progressGo.await(60, TimeUnit.SECONDS);
        }
        ConsumerRecord<String, String> record = records.get(i);
        effect("progress", header(record, "order-no"), record.value());
        ack.acknowledge(i);
      }
    }

    @Idempotent(bizType = "ackfail", header = "order-no")
    @KafkaListener(
        id = "bt-ackfail",
        topics = "bt-ackfail",
        batch = "true",
        containerFactory = "manualAckFactory")
    public void onAckThenFail(List<ConsumerRecord<String, String>> records, Acknowledgment ack) {
      Switches.seen("bt-ackfail", keys(records));
      for (int i = 0; i < records.size(); i++) {
        ConsumerRecord<String, String> record = records.get(i);
        String key = header(record, "order-no");
        effect("ackfail", key, record.value());
        ack.acknowledge(i);
        if (record.value().equals("reported failed after its ack")
            && Switches.calls.get(key).get() == 1) {
          throw new BatchListenerFailedException(
              "failed after acknowledging", new IllegalStateException("late failure"), i);
        }
      }
    }

    @Transactional
    @Idempotent(bizType = "txack", header = "order-no")
    @KafkaListener(
        id = "bt-txack",
        topics = "bt-txack",
        batch = "true",
        containerFactory = "manualAckFactory")
    public void onTransactionalAck(
        List<ConsumerRecord<String, String>> records, Acknowledgment ack) {
      Switches.seen("bt-txack", keys(records));
      for (int i = 0; i < records.size(); i++) {
        ConsumerRecord<String, String> record = records.get(i);
        String key = header(record, "order-no");
        effect("txack", key, record.value());
        if (record.value().startsWith("fails once") && Switches.calls.get(key).get() == 1) {
          throw new IllegalStateException("failed after acknowledging the records before");
        }
        ack.acknowledge(i);
      }
    }

    @Transactional
    @Idempotent(bizType = "txackthread", header = "order-no")
    @KafkaListener(
        id = "bt-txack-thread",
        topics = "bt-txack-thread",
        batch = "true",
        containerFactory = "manualAckFactory")
    public void onTransactionalAckFromAnotherThread(
        List<ConsumerRecord<String, String>> records, Acknowledgment ack)
        throws InterruptedException {
      Switches.seen("bt-txack-thread", keys(records));
      for (int i = 0; i < records.size(); i++) {
        ConsumerRecord<String, String> record = records.get(i);
        String key = header(record, "order-no");
        effect("txackthread", key, record.value());
        if (record.value().startsWith("fails once") && Switches.calls.get(key).get() == 1) {
          throw new IllegalStateException("failed after acknowledging the records before");
        }
        int index = i;
        Thread acknowledging = new Thread(() -> ack.acknowledge(index));
        acknowledging.start();
        acknowledging.join();
      }
    }

    @Transactional
    @Idempotent(bizType = "txfail", header = "order-no")
    @KafkaListener(id = "bt-tx-fail", topics = "bt-tx-fail", batch = "true")
    public void onTransactionalFail(List<ConsumerRecord<String, String>> records) {
      Switches.seen("bt-tx-fail", keys(records));
      for (int i = 0; i < records.size(); i++) {
        ConsumerRecord<String, String> record = records.get(i);
        String key = header(record, "order-no");
        effect("txfail", key, record.value());
        if (record.value().equals("fails once") && Switches.calls.get(key).get() == 1) {
          throw new BatchListenerFailedException(
              "downstream timeout", new IllegalStateException("downstream timeout"), i);
        }
      }
    }

    @Transactional
    @Idempotent(bizType = "txnack", header = "order-no")
    @KafkaListener(
        id = "bt-tx-nack",
        topics = "bt-tx-nack",
        batch = "true",
        containerFactory = "manualAckFactory")
    public void onTransactionalNack(
        List<ConsumerRecord<String, String>> records, Acknowledgment ack) {
      Switches.seen("bt-tx-nack", keys(records));
      for (int i = 0; i < records.size(); i++) {
        ConsumerRecord<String, String> record = records.get(i);
        String key = header(record, "order-no");
        effect("txnack", key, record.value());
        if (record.value().equals("fails once") && Switches.calls.get(key).get() == 1) {
          // Its downstream failed: the batch's work is undone, and the record is to come again.
          TransactionAspectSupport.currentTransactionStatus().setRollbackOnly();
          ack.nack(i, Duration.ofMillis(100));
          return;
        }
      }
      ack.acknowledge();
    }

    @Idempotent(bizType = "keyless", header = "order-no")
    @KafkaListener(id = "bt-keyless", topics = "bt-keyless", batch = "true")
    public void onKeyless(List<ConsumerRecord<String, String>> records) {
      Switches.seen("bt-keyless", keys(records));
      records.forEach(r -> effect("keyless", header(r, "order-no"), r.value()));
    }
  }
}
