package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.KEY_HEADER;
import static io.consumerdedup.kafka.LoopFixture.WAIT;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.FaultyDataSource;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The loop with claims per poll (the default): one claim round trip per poll, SUCCESS marks written
 * in the background, and an offset committed only behind written marks.
 */
class DedupPollLoopBatchTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_batch");

  private final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();
  private final ExecutorService threads = Executors.newCachedThreadPool();
  private final AtomicInteger claimRoundTrips = new AtomicInteger();
  private final AtomicInteger storeFailures = new AtomicInteger();

  @AfterEach
  void tearDown() throws InterruptedException {
    threads.shutdownNow();
    threads.awaitTermination(30, TimeUnit.SECONDS);
  }

  private final DedupListener counting =
      new DedupListener() {
        @Override
        public void claimTimed(DedupKey key, Duration elapsed) {
          claimRoundTrips.incrementAndGet();
        }

        @Override
        public void storeFailed(DedupKey key, DedupStoreException error) {
          storeFailures.incrementAndGet();
        }
      };

  private IdempotentExecutor executor(DedupStore store) {
    return IdempotentExecutor.builder(store).listener(counting).build();
  }

  private DedupPollLoop<String, String> start(
      IdempotentExecutor executor, RecordHandler<String, String> work) {
    IdempotentRecordHandler<String, String> handler =
        LoopFixture.handler(executor).handler(work).build();
    DedupPollLoop<String, String> loop =
        LoopFixture.quick(
                DedupPollLoop.builder(
                    TestKafka.consumerConfig(fixture.group()), List.of(fixture.topic()), handler))
            .deadLetterHandler(
                (record, reason) -> {
                  throw new AssertionError("nothing should be dead-lettered: " + reason);
                })
            .build();
    threads.submit(loop);
    return loop;
  }

  private void send(String... orderNos) throws Exception {
    for (String orderNo : orderNos) {
      ProducerRecord<String, String> record =
          new ProducerRecord<>(fixture.topic(), 0, orderNo, "charge " + orderNo);
      record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
      fixture.producer().send(record);
    }
    fixture.producer().flush();
  }

  private void apply(String orderNo) {
    effects.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
  }

  /** Order numbers of this test's own (the tests share one dedup table). */
  private static String order(int i) {
    return fixture.topic() + "-ORD-" + i;
  }

  private static String[] orders(int count) {
    String[] orderNos = new String[count];
    for (int i = 0; i < count; i++) {
      orderNos[i] = order(i);
    }
    return orderNos;
  }

  private DedupRecord record(int i) {
    return fixture.store().find(DedupKey.of(BIZ_TYPE, order(i))).orElseThrow();
  }

  @Test
  void aPollsKeysAreClaimedInOneRoundTripAndEachBusinessActionIsAppliedOnce() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    // 200 records, 20 of them a repeat of an earlier key (a producer retry) in the same poll.
    String[] orderNos = orders(200);
    for (int i = 180; i < 200; i++) {
      orderNos[i] = order(i - 180);
    }
    send(orderNos);

    try (IdempotentExecutor executor = executor(fixture.store());
        DedupPollLoop<String, String> loop =
            start(executor, record -> apply(LoopFixture.orderNo(record)))) {
      LoopFixture.awaitCommitted(
          fixture.group(), Map.of(new TopicPartition(fixture.topic(), 0), 200L));
    }

    assertThat(effects).hasSize(180);
    assertThat(effects.values()).allSatisfy(count -> assertThat(count).hasValue(1));
    assertThat(record(179).status()).isEqualTo(DedupStatus.SUCCESS);
    // One claim per poll, plus one per repeated key (claimed after its first copy ended); per
    // record it would be 200.
    assertThat(claimRoundTrips.get()).isLessThanOrEqualTo(20 + 10);
  }

  @Test
  void aFailureInsideABatchRetriesThatRecordAndReleasesTheRestWithoutCountingAnAttempt()
      throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    send(orders(10));
    AtomicInteger failuresLeft = new AtomicInteger(1);

    try (IdempotentExecutor executor = executor(fixture.store());
        DedupPollLoop<String, String> loop =
            start(
                executor,
                record -> {
                  String orderNo = LoopFixture.orderNo(record);
                  if (orderNo.equals(order(4)) && failuresLeft.getAndDecrement() > 0) {
                    throw new IllegalStateException("payment provider timed out");
                  }
                  apply(orderNo);
                })) {
      LoopFixture.awaitCommitted(
          fixture.group(), Map.of(new TopicPartition(fixture.topic(), 0), 10L));
    }

    assertThat(failuresLeft.get()).as("the failure happened").isNegative();
    assertThat(effects).hasSize(10);
    assertThat(effects.values()).allSatisfy(count -> assertThat(count).hasValue(1));
    assertThat(record(3).attempts()).isEqualTo(1);
    assertThat(record(4).attempts()).as("failed once, then succeeded").isEqualTo(2);
    // Claimed with the batch, released when ORD-4 failed, claimed again: still one attempt. Not
    // released, they would have waited out a live lease (five minutes) instead.
    for (int i = 5; i < 10; i++) {
      assertThat(record(i).attempts()).as(order(i)).isEqualTo(1);
      assertThat(record(i).status()).isEqualTo(DedupStatus.SUCCESS);
    }
  }

  @Test
  void anOffsetIsNotCommittedPastARecordWhoseSuccessCouldNotBeWritten() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    send(orders(10));
    try (FaultyDataSource faulty = FaultyDataSource.on(fixture.schema(), 4, Duration.ofSeconds(2));
        IdempotentExecutor executor =
            executor(
                JdbcDedupStore.builder(faulty)
                    .retryMaxDuration(Duration.ofMillis(500))
                    .statementTimeout(Duration.ofSeconds(1))
                    .build())) {
      try (DedupPollLoop<String, String> loop =
          start(
              executor,
              record -> {
                String orderNo = LoopFixture.orderNo(record);
                apply(orderNo);
                if (orderNo.equals(order(3)) && effects.get(orderNo).get() == 1) {
                  // The database goes away after this handler applied its effect.
                  faulty.proxy().cutAll();
                  faulty.proxy().refuse();
                }
              })) {
        await().atMost(WAIT).untilAsserted(() -> assertThat(storeFailures.get()).isPositive());
        Thread.sleep(1_000);
        assertThat(TestKafka.committedOffsets(fixture.group()))
            .as("nothing committed past ORD-3 while its SUCCESS is not written")
            .doesNotContainEntry(new TopicPartition(fixture.topic(), 0), 10L);
        assertThat(effects).containsKeys(order(0), order(3));

        faulty.proxy().pass();
        LoopFixture.awaitCommitted(
            fixture.group(), Map.of(new TopicPartition(fixture.topic(), 0), 10L));
      }
    }

    assertThat(effects).hasSize(10);
    assertThat(effects.values()).allSatisfy(count -> assertThat(count).hasValue(1));
    for (int i = 0; i < 10; i++) {
      assertThat(record(i).status()).as(order(i)).isEqualTo(DedupStatus.SUCCESS);
    }
  }
}
