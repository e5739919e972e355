package io.consumerdedup.kafka;

import io.consumerdedup.core.internal.Durations;
import io.consumerdedup.core.internal.FailureTexts;
import io.consumerdedup.core.internal.StoredText;
import io.consumerdedup.kafka.internal.RecordSources;
import io.consumerdedup.kafka.internal.UndeserializableRecords;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Function;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.RecordDeserializationException;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The usual {@link DeadLetterHandler}: sends the record, with the same key, value and headers, to
 * {@code <topic>-dlt} (by default, the name spring-kafka's {@code DeadLetterPublishingRecoverer}
 * gives it, so a plain consumer and a Spring listener of the same topic share one dead-letter
 * topic; {@link Builder#topicSuffix(String)} changes it), and adds headers that say why and where
 * it came from. It waits for the broker to acknowledge the send, so {@link DedupPollLoop} commits
 * past the record only once the dead letter is safely written; a producer that does not wait for
 * the broker ({@code acks=0}) writes nothing this publisher can vouch for, and each send throws. A
 * send not acknowledged within the {@link Builder#sendTimeout(Duration) send timeout} goes on in
 * the producer, which may still write it: the next call for the same record (same dead-letter
 * topic, topic, partition and offset, from the same consumer group) waits for that send instead of
 * sending a second dead letter, and sends anew only if it failed. A publisher shared by the loops
 * of several groups is told each loop's group by {@link DedupPollLoop} and {@link DedupShareLoop},
 * so one group's dead letter of a record is never taken for another's. Such a send, once written,
 * is remembered for five minutes after the broker's answer (not for the life of the publisher, as
 * its record may never come back to it): a try of the record later than that writes a second dead
 * letter.
 *
 * <pre>{@code
 * Producer<String, String> dltProducer = new KafkaProducer<>(producerConfig); // acks=all
 * Producer<byte[], byte[]> rawDltProducer = new KafkaProducer<>(
 *     producerConfig, new ByteArraySerializer(), new ByteArraySerializer());
 * DeadLetterHandler<String, String> deadLetters = KafkaDeadLetterPublisher.builder(dltProducer)
 *     .rawProducer(rawDltProducer)   // for records that cannot be deserialized
 *     .groupId("billing")
 *     .build();
 * }</pre>
 *
 * <p>A record whose key or value the consumer cannot deserialize exists only as bytes, which the
 * typed producer cannot send; {@link DeadLetterHandler#deadLetterUndeserializable} sends those
 * bytes unchanged with the {@link Builder#rawProducer(Producer) raw producer} (spring-kafka's
 * DeadLetterPublishingRecoverer splits its producers by value type the same way). Without one it
 * throws, and {@link DedupPollLoop} holds such a record rather than skip it.
 *
 * <p>The added headers, all UTF-8 text (numbers in decimal), appended after the record's own
 * headers; a record dead-lettered twice carries two of each, and {@code lastHeader} is the newest:
 *
 * <ul>
 *   <li>{@value #EXCEPTION_CLASS_HEADER}: the reason's class name, such as {@code
 *       io.consumerdedup.core.DedupKeyMissingException}
 *   <li>{@value #EXCEPTION_MESSAGE_HEADER}: its message (omitted when it has none; a text naming
 *       what its {@code getMessage()} threw, if it threw), at most {@value #MAX_MESSAGE_LENGTH}
 *       characters, cut between two code points (never between the halves of an emoji); for a
 *       record that cannot be deserialized, followed by the deserializer's exception, which Kafka's
 *       message leaves out. Also omitted (logged at WARN) when the broker or producer refuses the
 *       dead letter with it as too large ({@code RecordTooLargeException}: a record near the
 *       dead-letter topic's {@code max.message.bytes}), so that the record is still dead-lettered;
 *       one too large even without it is refused, and the loop holds it until the limit is raised
 *   <li>{@value #ORIGINAL_TOPIC_HEADER}, {@value #ORIGINAL_PARTITION_HEADER}, {@value
 *       #ORIGINAL_OFFSET_HEADER}: where the record was consumed
 *   <li>{@value #ORIGINAL_GROUP_HEADER}: the consumer group that gave the record up: the loop's own
 *       group when {@link DedupPollLoop} or {@link DedupShareLoop} calls, else the one of {@link
 *       Builder#groupId(String)} (omitted when neither is known)
 *   <li>{@value #UNDESERIALIZABLE_HEADER}: on a record that cannot be deserialized only, {@code
 *       key} or {@code value}: the part the deserializer rejected (absent if the consumer's
 *       exception does not say)
 * </ul>
 *
 * <p>The partition is left to the producer's partitioner (by key), so the dead-letter topic may
 * have any number of partitions. The dead letter is stamped with the time it is sent, not the
 * original time, so the dead-letter topic's retention counts from the failure. The producers are
 * not closed by this class; the typed one needs serializers for the consumer's key and value types,
 * the raw one {@code ByteArraySerializer}s. Replaying a dead letter (consuming {@code <topic>-dlt}
 * with an idempotent handler) retries it: the business key header travels with the record, and a
 * FAILED dedup record allows a new attempt.
 */
public final class KafkaDeadLetterPublisher<K, V> implements DeadLetterHandler<K, V> {

  /** Header: class name of the exception that made the record a dead letter. */
  public static final String EXCEPTION_CLASS_HEADER = "dedup-dlt-exception-class";

  /** Header: message of the exception that made the record a dead letter. */
  public static final String EXCEPTION_MESSAGE_HEADER = "dedup-dlt-exception-message";

  /** Header: the topic the record was consumed from. */
  public static final String ORIGINAL_TOPIC_HEADER = "dedup-dlt-original-topic";

  /** Header: the partition the record was consumed from, in decimal. */
  public static final String ORIGINAL_PARTITION_HEADER = "dedup-dlt-original-partition";

  /** Header: the record's offset in its original partition, in decimal. */
  public static final String ORIGINAL_OFFSET_HEADER = "dedup-dlt-original-offset";

  /** Header: the consumer group that gave up on the record. */
  public static final String ORIGINAL_GROUP_HEADER = "dedup-dlt-original-group";

  /**
   * Header, on a record that could not be deserialized only: {@code key} or {@code value}, the part
   * the consumer's deserializer rejected.
   */
  public static final String UNDESERIALIZABLE_HEADER = "dedup-dlt-undeserializable";

  /**
   * Suffix of the default dead-letter topic name: spring-kafka's ({@code
   * DeadLetterPublishingRecoverer} and {@code @RetryableTopic} name a topic's dead letters {@code
   * <topic>-dlt}).
   */
  public static final String DEFAULT_TOPIC_SUFFIX = "-dlt";

  /** Default longest wait for the broker to acknowledge a dead letter. */
  public static final Duration DEFAULT_SEND_TIMEOUT = Duration.ofSeconds(30);

  /** Longer exception messages are cut, so that a stack of causes cannot exceed a record's size. */
  public static final int MAX_MESSAGE_LENGTH = 4000;

  private static final Logger log = LoggerFactory.getLogger(KafkaDeadLetterPublisher.class);

  private final Producer<K, V> producer;
  private final @Nullable Producer<byte[], byte[]> rawProducer;
  private final Function<ConsumerRecord<K, V>, String> destination;
  private final Function<ConsumerRecord<byte[], byte[]>, String> rawDestination;
  private final @Nullable String groupId;
  private final Duration sendTimeout;

  /**
   * How long a send answered after its caller stopped waiting is kept for a later call of the same
   * record. That call comes with the caller's next try, a back-off later (the loops' default hold
   * back-off is at most 30 s); a record that never comes back (its partition went to another
   * instance, or it was committed past otherwise) must not be kept for the life of the publisher.
   */
  static final Duration DEFAULT_ANSWERED_RETENTION = Duration.ofMinutes(5);

  /**
   * Sends whose answer was not awaited to the end (a timeout, an interrupt), until a later call for
   * the same record sees them answered, or, answered successfully, for the answered retention;
   * shared by every thread that uses this publisher, as a rebalance can hand a held record to
   * another loop of the same application. One that failed is removed when it fails.
   */
  private final Map<Letter, Send> unanswered = new ConcurrentHashMap<>();

  private final long answeredRetentionNanos;

  private KafkaDeadLetterPublisher(
      Builder<K, V> builder,
      Function<ConsumerRecord<K, V>, String> destination,
      Function<ConsumerRecord<byte[], byte[]>, String> rawDestination) {
    this.producer = builder.producer;
    this.rawProducer = builder.rawProducer;
    this.destination = destination;
    this.rawDestination = rawDestination;
    this.groupId = builder.groupId;
    this.sendTimeout = builder.sendTimeout;
    this.answeredRetentionNanos = builder.answeredRetention.toNanos();
  }

  /** How many sends this publisher keeps for a later call of the same record; for tests. */
  int sendsKept() {
    return unanswered.size();
  }

  /** Starts building a publisher that sends with {@code producer}. */
  public static <K, V> Builder<K, V> builder(Producer<K, V> producer) {
    return new Builder<>(producer);
  }

  /**
   * Sends the record to its dead-letter topic and waits for the acknowledgement.
   *
   * @throws KafkaException if the send failed or was not acknowledged within the send timeout (or
   *     the producer does not wait for acknowledgements: acks=0)
   * @throws InterruptException if the thread was interrupted while waiting (the flag is restored)
   */
  @Override
  public void deadLetter(ConsumerRecord<K, V> record, Exception reason) {
    deadLetter(record, reason, groupId);
  }

  /**
   * As {@link #deadLetter(ConsumerRecord, Exception)}, for a loop of consumer group {@code group}:
   * a send of that group's is never taken for another group's dead letter of the same record.
   */
  void deadLetter(ConsumerRecord<K, V> record, Exception reason, @Nullable String group) {
    send(
        producer,
        group,
        destination.apply(record),
        record,
        withMessage -> headers(record, reason, withMessage, group),
        reason);
  }

  /** {@code handler}'s {@code deadLetter}, telling a publisher the group of the calling loop. */
  static <K, V> void deadLetterFor(
      DeadLetterHandler<K, V> handler,
      String group,
      ConsumerRecord<K, V> record,
      Exception reason) {
    if (handler instanceof KafkaDeadLetterPublisher<K, V> publisher) {
      publisher.deadLetter(record, reason, group);
    } else {
      handler.deadLetter(record, reason);
    }
  }

  /** {@code handler}'s {@code deadLetterUndeserializable}, telling a publisher the loop's group. */
  static void deadLetterUndeserializableFor(
      DeadLetterHandler<?, ?> handler,
      String group,
      ConsumerRecord<byte[], byte[]> record,
      Exception reason) {
    if (handler instanceof KafkaDeadLetterPublisher<?, ?> publisher) {
      publisher.deadLetterUndeserializable(record, reason, group);
    } else {
      handler.deadLetterUndeserializable(record, reason);
    }
  }

  /**
   * Whether {@link #deadLetterUndeserializable} can write a record: whether a {@link
   * Builder#rawProducer(Producer) raw producer} was given.
   */
  public boolean writesUndeserializable() {
    return rawProducer != null;
  }

  /**
   * Sends the raw bytes of a record that could not be deserialized to its dead-letter topic with
   * the {@link Builder#rawProducer(Producer) raw producer}, adding {@value
   * #UNDESERIALIZABLE_HEADER} to the usual headers, and waits for the acknowledgement.
   *
   * @throws IllegalStateException if no raw producer was given
   * @throws KafkaException if the send failed or was not acknowledged within the send timeout (or
   *     the producer does not wait for acknowledgements: acks=0)
   * @throws InterruptException if the thread was interrupted while waiting (the flag is restored)
   */
  @Override
  public void deadLetterUndeserializable(ConsumerRecord<byte[], byte[]> record, Exception reason) {
    deadLetterUndeserializable(record, reason, groupId);
  }

  /**
   * As {@link #deadLetterUndeserializable(ConsumerRecord, Exception)}, for a loop of {@code group}.
   */
  void deadLetterUndeserializable(
      ConsumerRecord<byte[], byte[]> record, Exception reason, @Nullable String group) {
    Producer<byte[], byte[]> rawProducer = this.rawProducer;
    if (rawProducer == null) {
      throw new IllegalStateException(
          "Cannot dead-letter "
              + describe(record, group)
              + ", which cannot be deserialized: the KafkaDeadLetterPublisher has no raw producer;"
              + " build it with rawProducer(...), a Producer<byte[], byte[]> with"
              + " ByteArraySerializer for keys and values");
    }
    send(
        rawProducer,
        group,
        rawDestination.apply(record),
        record,
        withMessage -> {
          Headers headers = headers(record, reason, withMessage, group);
          if (reason instanceof RecordDeserializationException undeserializable) {
            UndeserializableRecords.rejectedPart(undeserializable)
                .ifPresent(part -> add(headers, UNDESERIALIZABLE_HEADER, part));
          }
          return headers;
        },
        reason);
  }

  /**
   * Sends the dead letter with the exception message header, or, if that makes it larger than the
   * dead-letter topic or the producer accepts, without it: the message adds up to {@value
   * #MAX_MESSAGE_LENGTH} characters to the record, and a record near the size limit would be
   * refused on every try, holding its partition for good.
   *
   * @param headers the dead letter's headers, with the exception message header or without it
   */
  private <T, U> void send(
      Producer<T, U> sender,
      @Nullable String group,
      String topic,
      ConsumerRecord<T, U> record,
      Function<Boolean, Headers> headers,
      Exception reason) {
    Headers full = headers.apply(true);
    try {
      sendOnce(sender, group, topic, record, full, reason);
      return;
    } catch (KafkaException e) {
      if (!tooLarge(e) || messageOf(reason) == null) {
        throw tooLarge(e) ? tooLargeForTopic(record, group, topic, e) : e;
      }
      log.warn(
          "The dead letter of {} is too large for {} with the exception message; sending it"
              + " without header {} (header {} still names {})",
          describe(record, group),
          topic,
          EXCEPTION_MESSAGE_HEADER,
          EXCEPTION_CLASS_HEADER,
          reason.getClass().getName());
    }
    try {
      sendOnce(sender, group, topic, record, headers.apply(false), reason);
    } catch (KafkaException e) {
      throw tooLarge(e) ? tooLargeForTopic(record, group, topic, e) : e;
    }
  }

  private static boolean tooLarge(Throwable e) {
    for (Throwable cause = e; cause != null; cause = cause.getCause()) {
      if (cause instanceof RecordTooLargeException) {
        return true;
      }
    }
    return false;
  }

  private static KafkaException tooLargeForTopic(
      ConsumerRecord<?, ?> record, @Nullable String group, String topic, KafkaException e) {
    return new KafkaException(
        "Could not dead-letter "
            + describe(record, group)
            + ": it is too large for "
            + topic
            + " even without the exception message; it is held until the dead-letter topic's"
            + " max.message.bytes (and the producer's max.request.size) are raised to take it",
        e);
  }

  private <T, U> void sendOnce(
      Producer<T, U> sender,
      @Nullable String group,
      String topic,
      ConsumerRecord<T, U> record,
      Headers headers,
      Exception reason) {
    Letter letter = new Letter(group, topic, record.topic(), record.partition(), record.offset());
    forgetAnsweredLongAgo();
    Send mine = new Send();
    Send sent =
        unanswered.compute(
            letter,
            (same, earlier) ->
                earlier == null || earlier.answer.isCompletedExceptionally() ? mine : earlier);
    if (sent == mine) {
      ProducerRecord<T, U> deadLetter =
          new ProducerRecord<>(topic, null, null, record.key(), record.value(), headers);
      try {
        sender.send(
            deadLetter,
            (written, e) -> {
              if (e == null) {
                mine.answeredAt = System.nanoTime();
                // Answered before the clean-up: an Error there left the send unanswered, and every
                // later try of the record waited for it in vain.
                mine.answer.complete(written);
                forgetAnsweredLongAgo();
              } else {
                unanswered.remove(letter, mine); // a retry sends it anew
                mine.answer.completeExceptionally(e);
              }
            });
      } catch (RuntimeException | Error e) {
        unanswered.remove(letter, mine);
        mine.answer.completeExceptionally(e);
        throw e;
      }
    }
    try {
      RecordMetadata written = sent.answer.get(sendTimeout.toMillis(), TimeUnit.MILLISECONDS);
      unanswered.remove(letter, sent);
      if (!written.hasOffset()) {
        // A producer with acks=0 completes the send once it is on the wire: a dead letter the
        // broker refused (too large, no leader) was reported written, and the loop rejected or
        // committed past its record with no dead letter anywhere.
        throw new KafkaException(
            "Cannot tell whether the dead letter of "
                + describe(record, group)
                + " was written to "
                + topic
                + ": the producer does not wait for the broker's acknowledgement (acks=0); the"
                + " record is held, not passed. Give the dead-letter producer acks=all");
      }
      log.info(
          "Dead-lettered {} to {}-{}@{}: {}",
          describe(record, group),
          written.topic(),
          written.partition(),
          written.offset(),
          // Not the reason's own toString(): one that throws here, after the dead letter is
          // written, made the caller take it for unwritten and write it again at every try.
          FailureTexts.describe(reason));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptException(
          "Interrupted while dead-lettering " + describe(record, group), e);
    } catch (ExecutionException e) {
      unanswered.remove(letter, sent);
      throw new KafkaException(
          "Could not dead-letter " + describe(record, group) + " to " + topic, e.getCause());
    } catch (TimeoutException e) {
      // The producer goes on sending it (up to its delivery.timeout.ms) and may still write it:
      // the caller's next try for this record waits for this send instead of writing a second
      // dead letter.
      throw new KafkaException(
          "Dead letter of "
              + describe(record, group)
              + " to "
              + topic
              + " was not acknowledged within "
              + sendTimeout
              + "; the producer may still write it, and the next try for this record waits for"
              + " it",
          e);
    }
  }

  /**
   * Drops the sends answered successfully longer than the answered retention ago, whose records did
   * not come back; run on each send and each answer, so what is kept is bounded by the dead letters
   * of the last retention (and the producer's delivery timeout for those unanswered).
   */
  private void forgetAnsweredLongAgo() {
    long now = System.nanoTime();
    unanswered
        .values()
        .removeIf(
            send ->
                send.answer.isDone()
                    && !send.answer.isCompletedExceptionally()
                    && now - send.answeredAt > answeredRetentionNanos);
  }

  /** One send of a dead letter: the broker's answer, and when a successful one came. */
  private static final class Send {
    final CompletableFuture<RecordMetadata> answer = new CompletableFuture<>();

    /** {@link System#nanoTime()} of a successful answer; read only once {@link #answer} is done. */
    volatile long answeredAt;
  }

  /**
   * A record's dead letter: the consumer group giving the record up (null if unknown), its
   * dead-letter topic and where the record was consumed. A send not acknowledged within the send
   * timeout stays in {@link #unanswered} under it. Two groups consuming one topic each give up
   * their own records: one group's send is not the other's dead letter.
   */
  private record Letter(
      @Nullable String group, String topic, String sourceTopic, int partition, long offset) {}

  /**
   * The dead letter's headers, naming {@code group}: the group of the loop giving the record up,
   * which may differ from the one the publisher was built with when loops of several groups share
   * it (a dead letter of one group labelled with another's would be replayed to the wrong one).
   */
  private Headers headers(
      ConsumerRecord<?, ?> record, Exception reason, boolean withMessage, @Nullable String group) {
    Headers headers = new RecordHeaders(record.headers().toArray());
    add(headers, EXCEPTION_CLASS_HEADER, reason.getClass().getName());
    String message = withMessage ? messageOf(reason) : null;
    if (message != null) {
      // Cut at a code point: half an emoji went on the wire as '?'.
      add(headers, EXCEPTION_MESSAGE_HEADER, StoredText.cut(message, MAX_MESSAGE_LENGTH));
    }
    add(headers, ORIGINAL_TOPIC_HEADER, record.topic());
    add(headers, ORIGINAL_PARTITION_HEADER, Integer.toString(record.partition()));
    add(headers, ORIGINAL_OFFSET_HEADER, Long.toString(record.offset()));
    if (group != null) {
      add(headers, ORIGINAL_GROUP_HEADER, group);
    }
    return headers;
  }

  /**
   * Kafka's deserialization error names the record but not what the deserializer objected to, which
   * is what the reader of a dead letter needs.
   */
  private static @Nullable String messageOf(Exception reason) {
    // An application's exception whose getMessage() throws still has its record dead-lettered.
    String message = FailureTexts.messageOf(reason);
    Throwable cause = reason.getCause();
    if (reason instanceof RecordDeserializationException && cause != null) {
      String causeText = FailureTexts.describe(cause);
      return message == null ? causeText : message + " Cause: " + causeText;
    }
    return message;
  }

  private static void add(Headers headers, String name, String value) {
    headers.add(name, value.getBytes(StandardCharsets.UTF_8));
  }

  private static String describe(ConsumerRecord<?, ?> record, @Nullable String group) {
    return RecordSources.describe(record, group);
  }

  /** Builds a {@link KafkaDeadLetterPublisher}. */
  public static final class Builder<K, V> {
    private final Producer<K, V> producer;
    private @Nullable Producer<byte[], byte[]> rawProducer;
    private @Nullable Function<ConsumerRecord<K, V>, String> destination;
    private @Nullable Function<ConsumerRecord<byte[], byte[]>, String> rawDestination;
    private @Nullable String groupId;
    private String topicSuffix = DEFAULT_TOPIC_SUFFIX;
    private Duration sendTimeout = DEFAULT_SEND_TIMEOUT;
    private Duration answeredRetention = DEFAULT_ANSWERED_RETENTION;

    private Builder(Producer<K, V> producer) {
      this.producer = Objects.requireNonNull(producer, "producer");
    }

    /**
     * The consumer group, written to {@value #ORIGINAL_GROUP_HEADER} and named in logs, of the
     * records given to {@link #deadLetter(ConsumerRecord, Exception)} directly. A {@link
     * DedupPollLoop} or {@link DedupShareLoop} tells the publisher its own group, which is written
     * instead. Default: not written for direct calls.
     */
    public Builder<K, V> groupId(String groupId) {
      Objects.requireNonNull(groupId, "groupId");
      if (groupId.isBlank()) {
        throw new IllegalArgumentException("groupId must not be blank");
      }
      this.groupId = groupId;
      return this;
    }

    /**
     * The dead-letter topic of every record, deserializable or not, is its topic followed by {@code
     * suffix}, such as {@code .DLT} (the suffix of spring-kafka before 4.0, and of this class
     * before it took spring-kafka's). Default {@value #DEFAULT_TOPIC_SUFFIX}.
     *
     * @throws IllegalArgumentException if {@code suffix} is empty (the record would go back to its
     *     own topic) or holds a character Kafka does not allow in topic names
     */
    public Builder<K, V> topicSuffix(String suffix) {
      Objects.requireNonNull(suffix, "suffix");
      if (!suffix.matches("[a-zA-Z0-9._-]+")) {
        throw new IllegalArgumentException(
            "topicSuffix must be one or more of the characters Kafka allows in topic names"
                + " (ASCII letters, digits, '.', '_', '-'), was '"
                + suffix
                + "'");
      }
      this.topicSuffix = suffix;
      return this;
    }

    /**
     * The dead-letter topic of a record. Default: its topic followed by the {@link
     * #topicSuffix(String) suffix}.
     */
    public Builder<K, V> destination(Function<ConsumerRecord<K, V>, String> destination) {
      this.destination = Objects.requireNonNull(destination, "destination");
      return this;
    }

    /**
     * The producer that sends the raw bytes of records that cannot be deserialized: a {@code
     * Producer<byte[], byte[]>} with {@code ByteArraySerializer} for keys and values (the typed
     * producer cannot send bytes its serializers do not expect). It may share the typed producer's
     * configuration. Default: none, and such records are refused, so the loop holds them.
     */
    public Builder<K, V> rawProducer(Producer<byte[], byte[]> rawProducer) {
      this.rawProducer = Objects.requireNonNull(rawProducer, "rawProducer");
      return this;
    }

    /**
     * The dead-letter topic of a record that cannot be deserialized. Default: its topic followed by
     * the {@link #topicSuffix(String) suffix}; required when {@link #destination(Function)} is set
     * together with {@link #rawProducer(Producer)}, so that such records cannot silently go to
     * another topic than the others.
     */
    public Builder<K, V> rawDestination(
        Function<ConsumerRecord<byte[], byte[]>, String> rawDestination) {
      this.rawDestination = Objects.requireNonNull(rawDestination, "rawDestination");
      return this;
    }

    /**
     * Longest wait for the broker to acknowledge a dead letter. Default {@link
     * #DEFAULT_SEND_TIMEOUT}.
     */
    public Builder<K, V> sendTimeout(Duration sendTimeout) {
      this.sendTimeout = Durations.requirePositive("sendTimeout", sendTimeout);
      return this;
    }

    /** For tests: how long a send answered late is kept. */
    Builder<K, V> answeredRetention(Duration retention) {
      this.answeredRetention = Durations.requirePositive("answeredRetention", retention);
      return this;
    }

    /**
     * Builds the publisher.
     *
     * @throws IllegalStateException if {@link #destination(Function)} and {@link
     *     #rawProducer(Producer)} were set without {@link #rawDestination(Function)}
     */
    public KafkaDeadLetterPublisher<K, V> build() {
      if (destination != null && rawProducer != null && rawDestination == null) {
        throw new IllegalStateException(
            "destination(...) is set, so set rawDestination(...) too: records that cannot be"
                + " deserialized would otherwise go to <topic>"
                + topicSuffix
                + " rather than where the others go");
      }
      String suffix = topicSuffix;
      return new KafkaDeadLetterPublisher<>(
          this,
          destination != null ? destination : record -> record.topic() + suffix,
          rawDestination != null ? rawDestination : record -> record.topic() + suffix);
    }
  }
}
