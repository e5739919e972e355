package io.consumerdedup.examples.kafka;

import static io.consumerdedup.examples.kafka.RecordText.rootMessage;
import static io.consumerdedup.examples.kafka.RecordText.where;

import io.consumerdedup.kafka.KafkaDeadLetterPublisher;
import io.consumerdedup.kafka.RecordHandler;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.serialization.StringSerializer;
import org.jspecify.annotations.Nullable;

/**
 * The baseline "without dedup": a plain kafka-clients poll loop on a one-partition topic, as
 * applications write them. It runs the consumer code as it is, commits each record's offset after
 * it, and on failure seeks back and lets the record be delivered again (up to three attempts, then
 * to the dead-letter topic {@code <topic>-dlt}). Nothing stops a record that comes back from being
 * applied again; the runs with dedup use the library's {@link DedupConsumer} instead.
 */
public final class ConsumerLoop implements ScenarioConsumer {
  private static final int MAX_ATTEMPTS = 3;

  private final ConsumerSetup setup;
  private final TopicPartition partition;
  private final KafkaConsumer<String, String> consumer;
  private final RecordHandler<String, String> handler;
  private final Map<Long, Integer> failuresByOffset = new HashMap<>();
  private @Nullable KafkaProducer<String, String> deadLetterProducer;

  /** A loop that runs {@code handler}, the consumer code as it is, for every delivery. */
  public ConsumerLoop(ConsumerSetup setup, RecordHandler<String, String> handler) {
    this.setup = setup;
    this.handler = handler;
    this.partition = new TopicPartition(setup.topic(), 0);
    this.consumer = new KafkaConsumer<>(setup.consumerConfig());
  }

  @Override
  public End runUntilCommitted(long endOffset, Duration timeout) throws InterruptedException {
    consumer.subscribe(List.of(setup.topic()));
    long deadline = System.nanoTime() + timeout.toNanos();
    long committed = 0;
    while (committed < endOffset) {
      if (System.nanoTime() > deadline) {
        throw setup.notCommitted(endOffset, timeout, committed);
      }
      for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(100))) {
        if (!process(record)) {
          consumer.seek(partition, record.offset());
          Thread.sleep(setup.retryBackoff().toMillis());
          break;
        }
        setup.beforeCommit();
        try {
          consumer.commitSync(Map.of(partition, new OffsetAndMetadata(record.offset() + 1)));
        } catch (CommitFailedException | RebalanceInProgressException e) {
          setup.step(
              "offset commit of "
                  + where(record)
                  + " refused, the partition has moved to another member");
          return End.FENCED;
        }
        committed = record.offset() + 1;
      }
    }
    return End.CAUGHT_UP;
  }

  /** Returns true if the record is done with (its offset may be committed). */
  private boolean process(ConsumerRecord<String, String> record) {
    setup.stats().delivered();
    try {
      handler.handle(record);
      setup.step(where(record) + " processed");
      return true;
    } catch (Exception e) {
      int failures = failuresByOffset.merge(record.offset(), 1, Integer::sum);
      if (failures >= MAX_ATTEMPTS) {
        deadLetter(record, e);
        return true;
      }
      setup.stats().retried();
      setup.step(
          where(record)
              + " failed ("
              + rootMessage(e)
              + "); will be redelivered, attempt "
              + (failures + 1)
              + " of "
              + MAX_ATTEMPTS);
      return false;
    }
  }

  private void deadLetter(ConsumerRecord<String, String> record, Exception error) {
    if (deadLetterProducer == null) {
      deadLetterProducer =
          new KafkaProducer<>(
              setup.producerConfig(), new StringSerializer(), new StringSerializer());
    }
    ProducerRecord<String, String> copy =
        new ProducerRecord<>(
            deadLetterTopic(), null, record.key(), record.value(), record.headers());
    copy.headers()
        .add("dlt-error", rootMessage(error).getBytes(StandardCharsets.UTF_8))
        .add("dlt-source", where(record).getBytes(StandardCharsets.UTF_8));
    try {
      deadLetterProducer.send(copy).get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("Interrupted while dead-lettering " + where(record), e);
    } catch (ExecutionException e) {
      throw new IllegalStateException("Could not dead-letter " + where(record), e);
    }
    setup.stats().deadLettered();
    setup.step(
        where(record) + " dead-lettered to " + deadLetterTopic() + ": " + rootMessage(error));
  }

  /** Where the library's publisher and spring-kafka's recoverer would send it too. */
  private String deadLetterTopic() {
    return setup.topic() + KafkaDeadLetterPublisher.DEFAULT_TOPIC_SUFFIX;
  }

  @Override
  public void close() {
    consumer.close(Duration.ofSeconds(5));
    if (deadLetterProducer != null) {
      deadLetterProducer.close(Duration.ofSeconds(5));
    }
  }
}
