package io.consumerdedup.docs.kafka;

import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * Poll loops of one's own around the handler and around the executor, waiting for the SUCCESS marks
 * before committing offsets (docs/kafka-clients.md).
 */
final class OwnPollLoop {
  record Order(String number, String source) {}

  interface Bank {
    void charge(Order order) throws Exception;
  }

  private OwnPollLoop() {}

  static void poll(
      Consumer<String, String> consumer,
      IdempotentRecordHandler<String, String> payments,
      BooleanSupplier running) {
    // tag::own-loop[]
    while (running.getAsBoolean()) {
      ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
      List<ConsumerRecord<String, String>> polled = new ArrayList<>();
      records.forEach(polled::add);
      payments.prepare(polled); // claims the poll's keys in one statement
      Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
      for (TopicPartition partition : records.partitions()) {
        for (ConsumerRecord<String, String> record : records.records(partition)) {
          try {
            payments.process(record); // its SUCCESS is written in the background
          } catch (RuntimeException e) {
            // in progress elsewhere, database away, handler failed: see Disposition.of(e)
            consumer.seek(partition, record.offset()); // comes again with the next poll
            break;
          }
          next.put(partition, new OffsetAndMetadata(record.offset() + 1));
        }
      }
      // Waits for the poll's SUCCESS marks; a record whose mark is not written comes again.
      for (ConsumerRecord<String, String> notWritten : payments.settle()) {
        TopicPartition partition = new TopicPartition(notWritten.topic(), notWritten.partition());
        next.merge(
            partition,
            new OffsetAndMetadata(notWritten.offset()),
            (done, held) -> done.offset() <= held.offset() ? done : held);
        consumer.seek(partition, notWritten.offset());
      }
      consumer.commitSync(next);
    }
    // end::own-loop[]
  }

  static void charge(IdempotentExecutor executor, Bank bank, List<Order> orders) throws Exception {
    // tag::next-claim[]
    List<CompletableFuture<Void>> marks = new ArrayList<>();
    for (Order order : orders) {
      DedupClaim claim =
          executor.claim(DedupKey.of("payment", order.number()), null, order.source());
      if (claim.isDuplicate()) {
        continue;
      }
      try {
        bank.charge(order);
      } catch (Exception e) {
        claim.fail(e); // FAILED at once: the next delivery retries
        throw e;
      }
      marks.add(claim.completeWithNextClaim()); // SUCCESS in the next claim's commit
    }
    executor.flushMarks(); // no claim follows the last order
    CompletableFuture.allOf(marks.toArray(CompletableFuture[]::new)).join();
    // now the offsets of these orders may be committed
    // end::next-claim[]
  }
}
