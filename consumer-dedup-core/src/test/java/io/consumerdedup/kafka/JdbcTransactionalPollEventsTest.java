package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.KEY_HEADER;
import static io.consumerdedup.kafka.LoopFixture.orderNo;
import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.TransactionBoundDataSource;
import io.consumerdedup.micrometer.MicrometerDedupListener;
import io.consumerdedup.testing.TestKafka;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Mode TRANSACTIONAL with {@link JdbcTransactionalProcessor#of}: a record of the poll fails, the
 * poll's transaction rolls back, and each record runs again in a transaction of its own. The
 * rolled-back try was told to the listener as it went (a key claimed, a duplicate skipped), and the
 * record-by-record run told the same again: the counters a user watches said two duplicates where
 * one record was skipped once, two claims of a key claimed once.
 */
class JdbcTransactionalPollEventsTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_tx_events");

  @Test
  void aPollWhoseTransactionRolledBackIsToldOnlyAsItsRecordsRunAlone() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    try (IdempotentExecutor earlier = IdempotentExecutor.builder(fixture.store()).build()) {
      earlier.execute(DedupKey.of(BIZ_TYPE, "EV-0"), () -> "applied before");
    }
    send("EV-0"); // a duplicate
    send("EV-1");
    send("EV-2"); // fails once, in the poll's transaction

    SimpleMeterRegistry registry = new SimpleMeterRegistry();
    List<String> claimed = new CopyOnWriteArrayList<>();
    DedupListener claims =
        new DedupListener() {
          @Override
          public void claimed(DedupKey key, int attempt) {
            claimed.add(key.bizKey());
          }
        };
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(fixture.dataSource());
    AtomicInteger failuresLeft = new AtomicInteger(1);
    List<Exception> deadLettered = new CopyOnWriteArrayList<>();
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(transactions).build())
            .mode(DedupMode.TRANSACTIONAL)
            .listener(
                DedupListener.composite(List.of(new MicrometerDedupListener(registry), claims)))
            .build()) {
      IdempotentRecordHandler<String, String> handler =
          IdempotentRecordHandler.<String, String>builder(executor)
              .bizType(BIZ_TYPE)
              .key(KeyExtractors.header(KEY_HEADER))
              .handler(
                  record -> {
                    if (orderNo(record).equals("EV-2") && failuresLeft.getAndDecrement() > 0) {
                      throw new IllegalStateException("ledger rejected the charge");
                    }
                  })
              .build();
      DedupPollLoop<String, String> loop =
          LoopFixture.quick(
                  DedupPollLoop.builder(
                      TestKafka.consumerConfig(fixture.group()),
                      List.of(fixture.topic()),
                      JdbcTransactionalProcessor.of(transactions, handler)))
              .deadLetterHandler((record, reason) -> deadLettered.add(reason))
              .build();
      try (RunningLoop running = RunningLoop.start(loop)) {
        LoopFixture.awaitCommitted(
            fixture.group(), Map.of(new TopicPartition(fixture.topic(), 0), 3L));
      }
    }

    assertThat(failuresLeft).as("EV-2's handler failed in the poll's transaction").hasValue(-1);
    assertThat(deadLettered).as("dead-lettered").isEmpty();
    assertThat(outcomes(registry, "processed")).as("records counted processed").isEqualTo(2.0);
    assertThat(outcomes(registry, "duplicate"))
        .as("records counted duplicate, of one skipped once")
        .isEqualTo(1.0);
    assertThat(claimed).as("keys told claimed").containsExactlyInAnyOrder("EV-1", "EV-2");
    assertThat(outcomes(registry, "failed"))
        .as("failures counted, of a try that rolled back and was run again record by record")
        .isZero();
  }

  private static double outcomes(SimpleMeterRegistry registry, String outcome) {
    Counter counter =
        registry.find(MicrometerDedupListener.OUTCOMES).tag("outcome", outcome).counter();
    return counter == null ? 0 : counter.count();
  }

  private static void send(String orderNo) throws Exception {
    ProducerRecord<String, String> record =
        new ProducerRecord<>(fixture.topic(), 0, null, "charge " + orderNo);
    record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(record).get();
  }
}
