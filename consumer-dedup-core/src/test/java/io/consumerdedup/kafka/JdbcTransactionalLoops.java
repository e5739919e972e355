package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.KEY_HEADER;

import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.TransactionBoundDataSource;
import io.consumerdedup.micrometer.MicrometerDedupListener;
import io.consumerdedup.testing.TestKafka;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.MeterRegistry;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.BiFunction;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * What the tests of a poll loop running {@link JdbcTransactionalProcessor} share: records of the
 * fixture's topic keyed by their order number, an executor in mode TRANSACTIONAL over the
 * transactions, and the outcome counters a user watches.
 */
final class JdbcTransactionalLoops {
  private JdbcTransactionalLoops() {}

  /** Sends a charge keyed {@code orderNo} to partition 0 of the fixture's topic. */
  static void send(LoopFixture fixture, String orderNo) throws Exception {
    ProducerRecord<String, String> record =
        new ProducerRecord<>(fixture.topic(), 0, null, "charge " + orderNo);
    record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(record).get();
  }

  /**
   * Runs a loop over the fixture's topic until {@code committed} records of its partition 0 are
   * committed, each record handled by {@code handler} through an executor in mode TRANSACTIONAL
   * over {@code transactions} that tells {@code listener}, in the transactions {@code processor}
   * runs them in ({@link JdbcTransactionalProcessor#of} or {@link
   * JdbcTransactionalProcessor#perRecord}).
   *
   * @return the reasons the loop gave for the records it dead-lettered
   */
  static List<Exception> runUntilCommitted(
      LoopFixture fixture,
      TransactionBoundDataSource transactions,
      DedupListener listener,
      BiFunction<
              TransactionBoundDataSource,
              RecordProcessor<String, String>,
              JdbcTransactionalProcessor<String, String>>
          processor,
      RecordHandler<String, String> handler,
      long committed)
      throws Exception {
    List<Exception> deadLettered = new CopyOnWriteArrayList<>();
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(transactions).build())
            .mode(DedupMode.TRANSACTIONAL)
            .listener(listener)
            .build()) {
      IdempotentRecordHandler<String, String> records =
          LoopFixture.handler(executor).handler(handler).build();
      DedupPollLoop<String, String> loop =
          LoopFixture.quick(
                  DedupPollLoop.builder(
                      TestKafka.consumerConfig(fixture.group()),
                      List.of(fixture.topic()),
                      processor.apply(transactions, records)))
              .deadLetterHandler((record, reason) -> deadLettered.add(reason))
              .build();
      try (RunningLoop running = RunningLoop.start(loop)) {
        LoopFixture.awaitCommitted(
            fixture.group(), Map.of(new TopicPartition(fixture.topic(), 0), committed));
      }
    }
    return deadLettered;
  }

  /** The records counted with {@code outcome} by {@link MicrometerDedupListener}. */
  static double outcomes(MeterRegistry registry, String outcome) {
    Counter counter =
        registry.find(MicrometerDedupListener.OUTCOMES).tag("outcome", outcome).counter();
    return counter == null ? 0 : counter.count();
  }
}
