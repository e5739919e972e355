package io.consumerdedup.examples.kafka;

import io.consumerdedup.core.DedupInProgressException;
import io.consumerdedup.core.Disposition;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.examples.Progress;
import io.consumerdedup.examples.report.RunStats;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.RecordHandler;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.Set;
import java.util.StringJoiner;
import java.util.function.Consumer;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.jspecify.annotations.Nullable;

/**
 * A plain kafka-clients poll loop on a one-partition topic, as applications write them: process a
 * record, commit its offset, and on failure seek back and let it be delivered again (up to a number
 * of attempts, then to the dead-letter topic {@code <topic>.DLT}).
 *
 * <p>The same loop runs the consumer code bare ("without dedup") and wrapped in an {@link
 * IdempotentRecordHandler} ("with dedup"); only the {@link RecordProcessor} differs.
 */
public final class ConsumerLoop implements AutoCloseable {

  /** Handles one record; returns what it did. */
  @FunctionalInterface
  public interface RecordProcessor {
    Outcome process(ConsumerRecord<String, String> record) throws Exception;

    /** The consumer code as it is: every delivery runs it. */
    static RecordProcessor unprotected(RecordHandler<String, String> handler) {
      return record -> {
        handler.handle(record);
        return Outcome.PROCESSED;
      };
    }

    /** The consumer code behind the library: each business key is applied once. */
    static RecordProcessor deduplicated(IdempotentRecordHandler<String, String> handler) {
      return handler::handle;
    }
  }

  /** Why the loop stopped. */
  public enum End {
    /** Every record up to the end offset asked for is committed by this consumer. */
    CAUGHT_UP,
    /** A commit was refused: the group took the partition away (this consumer is a zombie). */
    FENCED
  }

  private final String name;
  private final String topic;
  private final TopicPartition partition;
  private final KafkaConsumer<String, String> consumer;
  private final Properties producerProperties;
  private final RecordProcessor processor;
  private final RunStats stats;
  private final Progress progress;
  private final int maxAttempts;
  private final Duration retryBackoff;
  private final Consumer<ConsumerRecord<String, String>> beforeCommit;
  private final Map<Long, Integer> failuresByOffset = new HashMap<>();
  private final Set<Long> inProgressAnnounced = new HashSet<>();
  private @Nullable KafkaProducer<String, String> deadLetterProducer;

  private ConsumerLoop(Builder builder) {
    this.name = builder.name;
    this.topic = builder.topic;
    this.partition = new TopicPartition(topic, 0);
    this.processor = Objects.requireNonNull(builder.processor, "processor");
    this.stats = Objects.requireNonNull(builder.stats, "stats");
    this.progress = Objects.requireNonNull(builder.progress, "progress");
    this.maxAttempts = builder.maxAttempts;
    this.retryBackoff = builder.retryBackoff;
    this.beforeCommit = builder.beforeCommit;
    Properties properties = new Properties();
    properties.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, builder.bootstrapServers);
    properties.put(ConsumerConfig.GROUP_ID_CONFIG, builder.groupId);
    properties.put(ConsumerConfig.CLIENT_ID_CONFIG, builder.groupId + "-" + name.replace(' ', '-'));
    properties.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    properties.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    // The broker's smallest session timeout by default: a dead member leaves the group soon.
    properties.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
    properties.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
    properties.putAll(builder.overrides);
    this.consumer =
        new KafkaConsumer<>(properties, new StringDeserializer(), new StringDeserializer());
    this.producerProperties = new Properties();
    producerProperties.put("bootstrap.servers", builder.bootstrapServers);
  }

  public static Builder builder(String bootstrapServers, String topic, String groupId) {
    return new Builder(bootstrapServers, topic, groupId);
  }

  /**
   * Polls until this consumer has committed every record below {@code endOffset}, or a commit is
   * refused.
   *
   * @throws IllegalStateException if neither happens within {@code timeout}
   */
  public End runUntilCommitted(long endOffset, Duration timeout) throws InterruptedException {
    consumer.subscribe(List.of(topic));
    long deadline = System.nanoTime() + timeout.toNanos();
    long committed = 0;
    while (committed < endOffset) {
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException(
            name
                + " did not commit "
                + topic
                + " up to offset "
                + endOffset
                + " within "
                + timeout
                + " (committed: "
                + committed
                + ")");
      }
      for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(100))) {
        if (!process(record)) {
          consumer.seek(partition, record.offset());
          Thread.sleep(retryBackoff.toMillis());
          break;
        }
        beforeCommit.accept(record);
        try {
          consumer.commitSync(Map.of(partition, new OffsetAndMetadata(record.offset() + 1)));
        } catch (CommitFailedException | RebalanceInProgressException e) {
          progress.step(
              name
                  + ": offset commit of "
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
    stats.delivered();
    try {
      Outcome outcome = processor.process(record);
      if (outcome == Outcome.DUPLICATE) {
        stats.duplicateSkipped();
        progress.step(name + ": " + where(record) + " is a duplicate, skipped");
      } else {
        progress.step(name + ": " + where(record) + " processed");
      }
      return true;
    } catch (DedupInProgressException e) {
      stats.retried();
      if (inProgressAnnounced.add(record.offset())) {
        progress.step(
            name
                + ": "
                + where(record)
                + " is in progress under "
                + e.holder()
                + "'s lease; redelivering it every "
                + retryBackoff.toMillis()
                + " ms until that holder finishes or its lease runs out");
      }
      return false;
    } catch (Exception e) {
      if (Disposition.of(e) == Disposition.DEAD_LETTER) {
        // Retrying cannot help a record without a usable key or with a conflicting payload.
        deadLetter(record, e);
        return true;
      }
      int failures = failuresByOffset.merge(record.offset(), 1, Integer::sum);
      if (failures >= maxAttempts) {
        deadLetter(record, e);
        return true;
      }
      stats.retried();
      progress.step(
          name
              + ": "
              + where(record)
              + " failed ("
              + rootMessage(e)
              + "); will be redelivered, attempt "
              + (failures + 1)
              + " of "
              + maxAttempts);
      return false;
    }
  }

  private void deadLetter(ConsumerRecord<String, String> record, Exception error) {
    if (deadLetterProducer == null) {
      deadLetterProducer =
          new KafkaProducer<>(producerProperties, new StringSerializer(), new StringSerializer());
    }
    ProducerRecord<String, String> copy =
        new ProducerRecord<>(topic + ".DLT", null, record.key(), record.value(), record.headers());
    copy.headers()
        .add("dlt-error", rootMessage(error).getBytes(StandardCharsets.UTF_8))
        .add("dlt-source", where(record).getBytes(StandardCharsets.UTF_8));
    try {
      deadLetterProducer.send(copy).get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("Interrupted while dead-lettering " + where(record), e);
    } catch (java.util.concurrent.ExecutionException e) {
      throw new IllegalStateException("Could not dead-letter " + where(record), e);
    }
    stats.deadLettered();
    progress.step(
        name + ": " + where(record) + " dead-lettered to " + topic + ".DLT: " + rootMessage(error));
  }

  /** Such as {@code payments@0 [order-no=A-1001]}. */
  static String where(ConsumerRecord<String, String> record) {
    StringJoiner headers = new StringJoiner(", ", " [", "]").setEmptyValue("");
    for (Header header : record.headers()) {
      headers.add(header.key() + "=" + new String(header.value(), StandardCharsets.UTF_8));
    }
    return record.topic() + "@" + record.offset() + headers;
  }

  private static String rootMessage(Throwable error) {
    Throwable root = error;
    while (root.getCause() != null) {
      root = root.getCause();
    }
    return root.getClass().getSimpleName() + ": " + root.getMessage();
  }

  @Override
  public void close() {
    consumer.close(Duration.ofSeconds(5));
    if (deadLetterProducer != null) {
      deadLetterProducer.close(Duration.ofSeconds(5));
    }
  }

  /** Builds a {@link ConsumerLoop}. */
  public static final class Builder {
    private final String bootstrapServers;
    private final String topic;
    private final String groupId;
    private String name = "consumer";
    private @Nullable RecordProcessor processor;
    private @Nullable RunStats stats;
    private @Nullable Progress progress;
    private int maxAttempts = 3;
    private Duration retryBackoff = Duration.ofMillis(200);
    private Consumer<ConsumerRecord<String, String>> beforeCommit = record -> {};
    private final Map<String, String> overrides = new HashMap<>();

    private Builder(String bootstrapServers, String topic, String groupId) {
      this.bootstrapServers = bootstrapServers;
      this.topic = topic;
      this.groupId = groupId;
    }

    /** How this consumer is named in progress lines, such as {@code consumer B}. */
    public Builder name(String name) {
      this.name = name;
      return this;
    }

    public Builder processor(RecordProcessor processor) {
      this.processor = processor;
      return this;
    }

    public Builder stats(RunStats stats) {
      this.stats = stats;
      return this;
    }

    public Builder progress(Progress progress) {
      this.progress = progress;
      return this;
    }

    /** Deliveries of a failing record before it goes to the dead-letter topic. Default 3. */
    public Builder maxAttempts(int maxAttempts) {
      if (maxAttempts < 1) {
        throw new IllegalArgumentException("maxAttempts must be at least 1, was " + maxAttempts);
      }
      this.maxAttempts = maxAttempts;
      return this;
    }

    public Builder retryBackoff(Duration retryBackoff) {
      this.retryBackoff = retryBackoff;
      return this;
    }

    /** Runs after a record is processed and before its offset is committed. */
    public Builder beforeCommit(Consumer<ConsumerRecord<String, String>> beforeCommit) {
      this.beforeCommit = beforeCommit;
      return this;
    }

    /** A consumer setting, such as {@code max.poll.interval.ms}. */
    public Builder consumerProperty(String name, String value) {
      overrides.put(name, value);
      return this;
    }

    public ConsumerLoop build() {
      return new ConsumerLoop(this);
    }
  }
}
