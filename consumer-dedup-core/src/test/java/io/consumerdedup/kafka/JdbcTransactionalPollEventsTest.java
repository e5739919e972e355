package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.JdbcTransactionalLoops.outcomes;
import static io.consumerdedup.kafka.JdbcTransactionalLoops.send;
import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.orderNo;
import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.TransactionBoundDataSource;
import io.consumerdedup.micrometer.MicrometerDedupListener;
import io.consumerdedup.testing.TestKafka;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
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
    send(fixture, "EV-0"); // a duplicate
    send(fixture, "EV-1");
    send(fixture, "EV-2"); // fails once, in the poll's transaction

    SimpleMeterRegistry registry = new SimpleMeterRegistry();
    List<String> claimed = new CopyOnWriteArrayList<>();
    DedupListener claims =
        new DedupListener() {
          @Override
          public void claimed(DedupKey key, int attempt) {
            claimed.add(key.bizKey());
          }
        };
    AtomicInteger failuresLeft = new AtomicInteger(1);
    List<Exception> deadLettered =
        JdbcTransactionalLoops.runUntilCommitted(
            fixture,
            TransactionBoundDataSource.of(fixture.dataSource()),
            DedupListener.composite(List.of(new MicrometerDedupListener(registry), claims)),
            JdbcTransactionalProcessor::of,
            record -> {
              if (orderNo(record).equals("EV-2") && failuresLeft.getAndDecrement() > 0) {
                throw new IllegalStateException("ledger rejected the charge");
              }
            },
            3);

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
}
