package io.consumerdedup.examples.kafka;

import io.consumerdedup.examples.Progress;
import io.consumerdedup.examples.report.RunStats;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Objects;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.jspecify.annotations.Nullable;

/**
 * One consumer of a scenario: where it reads, how it is named and what it reports to. The naive
 * loop ({@link ConsumerLoop}) and the library's loop ({@link DedupConsumer}) are built from the
 * same setup, so a run without dedup and a run with it differ only in what processes the records.
 */
public final class ConsumerSetup {
  private final String bootstrapServers;
  private final String topic;
  private final String groupId;
  private final String name;
  private final RunStats stats;
  private final Progress progress;
  private final Duration retryBackoff;
  private final Map<String, String> overrides;
  private final Runnable beforeCommit;

  private ConsumerSetup(Builder builder) {
    this.bootstrapServers = builder.bootstrapServers;
    this.topic = builder.topic;
    this.groupId = builder.groupId;
    this.name = builder.name;
    this.stats = Objects.requireNonNull(builder.stats, "stats");
    this.progress = Objects.requireNonNull(builder.progress, "progress");
    this.retryBackoff = builder.retryBackoff;
    this.overrides = Map.copyOf(builder.overrides);
    this.beforeCommit = builder.beforeCommit;
  }

  public static Builder builder(String bootstrapServers, String topic, String groupId) {
    return new Builder(bootstrapServers, topic, groupId);
  }

  /**
   * The consumer's settings: String keys and values, no auto-commit (the loop commits), the
   * earliest offset for a new group, and the broker's smallest session timeout, so that a dead
   * member leaves the group soon; then the overrides.
   */
  Map<String, Object> consumerConfig() {
    Map<String, Object> config = new HashMap<>();
    config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers);
    config.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
    config.put(ConsumerConfig.CLIENT_ID_CONFIG, groupId + "-" + name.replace(' ', '-'));
    config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
    config.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    config.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 6000);
    config.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 1000);
    config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    config.putAll(overrides);
    return config;
  }

  /** Settings of the dead-letter producer: it waits for every replica. */
  Map<String, Object> producerConfig() {
    return Map.of(
        ProducerConfig.BOOTSTRAP_SERVERS_CONFIG,
        bootstrapServers,
        ProducerConfig.ACKS_CONFIG,
        "all");
  }

  String topic() {
    return topic;
  }

  public String groupId() {
    return groupId;
  }

  /** How this consumer is named in progress lines, such as {@code consumer B}. */
  String name() {
    return name;
  }

  RunStats stats() {
    return stats;
  }

  /** Writes a progress line in this consumer's name. */
  void step(String line) {
    progress.step(name + ": " + line);
  }

  /** The wait before a failed or held record is tried again. */
  Duration retryBackoff() {
    return retryBackoff;
  }

  /** The failure of a consumer that did not commit up to {@code endOffset} in time. */
  IllegalStateException notCommitted(long endOffset, Duration timeout, long committed) {
    return new IllegalStateException(
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

  /** Runs right before each offset commit, after the records it commits were processed. */
  void beforeCommit() {
    beforeCommit.run();
  }

  /** Builds a {@link ConsumerSetup}. */
  public static final class Builder {
    private final String bootstrapServers;
    private final String topic;
    private final String groupId;
    private String name = "consumer";
    private @Nullable RunStats stats;
    private @Nullable Progress progress;
    private Duration retryBackoff = Duration.ofMillis(200);
    private final Map<String, String> overrides = new HashMap<>();
    private Runnable beforeCommit = () -> {};

    private Builder(String bootstrapServers, String topic, String groupId) {
      this.bootstrapServers = bootstrapServers;
      this.topic = topic;
      this.groupId = groupId;
    }

    public Builder name(String name) {
      this.name = name;
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

    public Builder retryBackoff(Duration retryBackoff) {
      this.retryBackoff = retryBackoff;
      return this;
    }

    /** A consumer setting, such as {@code max.poll.interval.ms}. */
    public Builder consumerProperty(String name, String value) {
      overrides.put(name, value);
      return this;
    }

    /** Runs after records are processed and before their offsets are committed. */
    public Builder beforeCommit(Runnable beforeCommit) {
      this.beforeCommit = beforeCommit;
      return this;
    }

    public ConsumerSetup build() {
      return new ConsumerSetup(this);
    }
  }
}
