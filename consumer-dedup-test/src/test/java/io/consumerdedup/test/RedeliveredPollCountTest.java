package io.consumerdedup.test;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.Outcome;
import io.consumerdedup.kafka.RecordProcessor;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;

/**
 * A test waits until {@code redeliveredCopies()} counts the copies, as the report asks, and then
 * asserts: the copies it counts must be those whose outcomes are known, though a poll's outcomes
 * are written after its last record (a poll loop's SUCCESS marks, one statement per poll).
 */
class RedeliveredPollCountTest {

  @Test
  void copiesOfAPollAreCountedOnlyOnceTheirOutcomesAreSettled() throws Exception {
    RedeliveryReport report = new RedeliveryReport();
    CountDownLatch copiesSettling = new CountDownLatch(1);
    CountDownLatch marksWritten = new CountDownLatch(1);
    RecordProcessor<String, String> marksPerPoll =
        new RecordProcessor<>() {
          private final Set<Long> applied = new HashSet<>();
          private int settled;

          @Override
          public Outcome process(ConsumerRecord<String, String> record) {
            if (!applied.add(record.offset())) {
              return Outcome.DUPLICATE;
            }
            report.bodyRan("payments", record);
            return Outcome.PROCESSED;
          }

          @Override
          public List<ConsumerRecord<String, String>> settle() {
            if (++settled == 2) { // the copies' poll: its marks take a while to be written
              copiesSettling.countDown();
              await(marksWritten);
            }
            return List.of();
          }
        };
    RecordProcessor<String, String> processor = report.redeliverEachRecord(marksPerPoll);
    List<ConsumerRecord<String, String>> poll =
        List.of(new ConsumerRecord<>("payments", 0, 0, "k", "v"));

    CompletableFuture<Void> loop =
        CompletableFuture.runAsync(
            () -> {
              processor.prepare(poll);
              poll.forEach(processor::process);
              processor.settle();
            });
    assertThat(copiesSettling.await(10, TimeUnit.SECONDS)).isTrue();
    int countedWhileSettling = report.redeliveredCopies();
    marksWritten.countDown();
    loop.get(10, TimeUnit.SECONDS);

    assertThat(countedWhileSettling)
        .as("copies counted before their poll's outcomes were settled")
        .isZero();
    assertThat(report.redeliveredCopies()).isEqualTo(1);
    report.assertNoBodyRanTwice();
  }

  private static void await(CountDownLatch latch) {
    try {
      latch.await(10, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
