package io.consumerdedup.examples.kafka;

import static io.consumerdedup.examples.kafka.RecordText.rootMessage;

import io.consumerdedup.kafka.DeadLetterHandler;
import io.consumerdedup.kafka.DedupPollLoop;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.JdbcTransactionalProcessor;
import io.consumerdedup.kafka.KafkaDeadLetterPublisher;
import io.consumerdedup.kafka.RecordProcessor;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A consumer "with dedup", built exactly as the README tells users to: a {@link DedupPollLoop}
 * running the library's processor ({@link IdempotentRecordHandler}, or {@link
 * JdbcTransactionalProcessor} around it), with a {@link KafkaDeadLetterPublisher} for what it gives
 * up on, on a poll thread of its own. The library decides what happens to each record; this class
 * only watches: it counts deliveries and outcomes for the report and sees its own offset commits.
 */
public final class DedupConsumer implements ScenarioConsumer {
  private final ConsumerSetup setup;
  private final ObservedConsumer consumer;
  private final KafkaProducer<String, String> deadLetterProducer;
  private final KafkaProducer<byte[], byte[]> rawDeadLetterProducer;
  private final DedupPollLoop<String, String> loop;
  private final ExecutorService pollThread = Executors.newSingleThreadExecutor();

  /** A loop over the setup's topic that runs {@code processor} for each record. */
  public DedupConsumer(ConsumerSetup setup, RecordProcessor<String, String> processor) {
    this.setup = setup;
    this.consumer = new ObservedConsumer(setup);
    this.deadLetterProducer =
        new KafkaProducer<>(setup.producerConfig(), new StringSerializer(), new StringSerializer());
    this.rawDeadLetterProducer =
        new KafkaProducer<>(
            setup.producerConfig(), new ByteArraySerializer(), new ByteArraySerializer());
    this.loop =
        DedupPollLoop.builder(
                consumer, List.of(setup.topic()), new ObservedProcessor(setup, processor))
            .deadLetterHandler(
                counted(
                    KafkaDeadLetterPublisher.builder(deadLetterProducer)
                        .rawProducer(rawDeadLetterProducer)
                        .groupId(setup.groupId())
                        .build()))
            .retryBackOff(setup.retryBackoff())
            // Short holds, so the demo's waits stay short; the defaults start at 1 s.
            .holdBackOff(setup.retryBackoff(), setup.retryBackoff().multipliedBy(4))
            .build();
  }

  /** The publisher, counting and reporting each record it dead-letters. */
  private DeadLetterHandler<String, String> counted(DeadLetterHandler<String, String> publisher) {
    return new DeadLetterHandler<>() {
      @Override
      public void deadLetter(ConsumerRecord<String, String> record, Exception reason) {
        publisher.deadLetter(record, reason);
        setup.stats().deadLettered();
        setup.step(
            RecordText.where(record)
                + " dead-lettered to "
                + setup.topic()
                + KafkaDeadLetterPublisher.DEFAULT_TOPIC_SUFFIX
                + ": "
                + rootMessage(reason));
      }

      @Override
      public void deadLetterUndeserializable(
          ConsumerRecord<byte[], byte[]> record, Exception reason) {
        publisher.deadLetterUndeserializable(record, reason);
        setup.stats().deadLettered();
        setup.step(
            record.topic() + "@" + record.offset() + " (cannot be deserialized) dead-lettered");
      }
    };
  }

  /**
   * Runs the loop until its consumer committed every record below {@code endOffset}, or had a
   * commit refused, then stops it (the loop commits what is done and closes the consumer).
   */
  @Override
  public End runUntilCommitted(long endOffset, Duration timeout) throws InterruptedException {
    Future<?> running = pollThread.submit(loop);
    long deadline = System.nanoTime() + timeout.toNanos();
    try {
      while (true) {
        if (consumer.fenced()) {
          return End.FENCED;
        }
        // Any member's commit counts: the partition may have moved back to another member, which
        // then committed past the record itself.
        if (consumer.groupCommitted() >= endOffset) {
          return End.CAUGHT_UP;
        }
        if (running.isDone()) {
          throw new IllegalStateException(
              setup.name() + " stopped polling before it committed up to offset " + endOffset,
              failure(running));
        }
        if (System.nanoTime() > deadline) {
          throw setup.notCommitted(endOffset, timeout, consumer.groupCommitted());
        }
        // The loop runs on its own thread; a look ten times a second is soon enough for a demo.
        Thread.sleep(100);
      }
    } finally {
      loop.close();
    }
  }

  private static Throwable failure(Future<?> running) throws InterruptedException {
    try {
      running.get();
      return new IllegalStateException("it ended without an error");
    } catch (ExecutionException e) {
      return e.getCause() != null ? e.getCause() : e;
    }
  }

  /** Stops the loop if it runs (it closes its consumer), and closes the dead-letter producers. */
  @Override
  public void close() {
    loop.close();
    pollThread.shutdownNow();
    deadLetterProducer.close(Duration.ofSeconds(5));
    rawDeadLetterProducer.close(Duration.ofSeconds(5));
  }
}
