package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.charset.StandardCharsets;
import java.util.Optional;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RecordDeserializationException;
import org.apache.kafka.common.errors.SerializationException;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;

/**
 * How records that cannot be deserialized reach a dead-letter handler, and how a handler that
 * cannot take them says what to configure; no broker needed.
 */
class KafkaDeadLetterPublisherTest {
  private static final byte[] RAW_VALUE = {0x7f, 0x00, 0x01};

  private final MockProducer<String, String> typed =
      new MockProducer<>(true, null, new StringSerializer(), new StringSerializer());
  private final MockProducer<byte[], byte[]> raw =
      new MockProducer<>(true, null, new ByteArraySerializer(), new ByteArraySerializer());

  @Test
  void aHandlerWrittenAsALambdaRefusesUndeserializableRecordsNamingWhatToImplement() {
    DeadLetterHandler<String, String> lambda = (record, reason) -> {};

    assertThatThrownBy(() -> lambda.deadLetterUndeserializable(rawRecord(), undeserializable()))
        .isInstanceOf(UnsupportedOperationException.class)
        .hasMessageContaining("DeadLetterHandler.deadLetterUndeserializable")
        .hasMessageContaining("rawProducer(...)");
  }

  @Test
  void withoutARawProducerThePublisherRefusesNamingTheRecordAndTheOption() {
    KafkaDeadLetterPublisher<String, String> publisher =
        KafkaDeadLetterPublisher.builder(typed).groupId("billing").build();

    assertThatThrownBy(() -> publisher.deadLetterUndeserializable(rawRecord(), undeserializable()))
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("payments-2@41 (group billing)")
        .hasMessageContaining("rawProducer(...)");
    assertThat(typed.history()).isEmpty();
  }

  @Test
  void aCustomDestinationWithARawProducerNeedsARawDestinationToo() {
    KafkaDeadLetterPublisher.Builder<String, String> builder =
        KafkaDeadLetterPublisher.builder(typed)
            .rawProducer(raw)
            .destination(record -> "dead-" + record.topic());

    assertThatThrownBy(builder::build)
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("rawDestination(...)");

    builder
        .rawDestination(record -> "dead-raw-" + record.topic())
        .build()
        .deadLetterUndeserializable(rawRecord(), undeserializable());
    ProducerRecord<byte[], byte[]> sent = raw.history().get(0);
    assertThat(sent.topic()).isEqualTo("dead-raw-payments");
    assertThat(sent.value()).isEqualTo(RAW_VALUE);
    assertThat(
            new String(
                sent.headers().lastHeader(KafkaDeadLetterPublisher.UNDESERIALIZABLE_HEADER).value(),
                StandardCharsets.UTF_8))
        .isEqualTo("value");
  }

  @Test
  void anExceptionThatDoesNotSayWhichPartWasRejectedIsDeadLetteredWithoutThatHeader() {
    RecordDeserializationException withoutOrigin =
        new RecordDeserializationException(
            new TopicPartition("payments", 2), 41, "Error deserializing", null);

    KafkaDeadLetterPublisher.builder(typed)
        .rawProducer(raw)
        .build()
        .deadLetterUndeserializable(rawRecord(), withoutOrigin);

    ProducerRecord<byte[], byte[]> sent = raw.history().get(0);
    assertThat(sent.value()).isEqualTo(RAW_VALUE);
    assertThat(sent.headers().lastHeader(KafkaDeadLetterPublisher.UNDESERIALIZABLE_HEADER))
        .isNull();
    assertThat(sent.headers().lastHeader(KafkaDeadLetterPublisher.ORIGINAL_OFFSET_HEADER).value())
        .isEqualTo("41".getBytes(StandardCharsets.UTF_8));
  }

  /**
   * A reason whose {@code getMessage()} throws (a message built from state it can no longer read):
   * the header could not be built, so every try threw and the loop held the record for good.
   */
  @Test
  void aReasonWhoseMessageCannotBeReadIsDeadLetteredSayingSo() {
    ConsumerRecord<String, String> record =
        new ConsumerRecord<>("payments", 0, 8, "key", "charge 13.00");
    IllegalStateException unreadable =
        new IllegalStateException() {
          @Override
          public String getMessage() {
            throw new UnsupportedOperationException("session closed");
          }
        };

    KafkaDeadLetterPublisher.builder(typed).build().deadLetter(record, unreadable);

    assertThat(typed.history()).as("dead letters written").hasSize(1);
    assertThat(
            new String(
                typed
                    .history()
                    .get(0)
                    .headers()
                    .lastHeader(KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER)
                    .value(),
                StandardCharsets.UTF_8))
        .isEqualTo("(its getMessage() threw java.lang.UnsupportedOperationException)");
  }

  /**
   * A long message cut to {@value KafkaDeadLetterPublisher#MAX_MESSAGE_LENGTH} characters where an
   * emoji (two UTF-16 characters) straddles the limit: cut between its halves, the header's UTF-8
   * ended in a {@code ?} the message never had.
   */
  @Test
  void aMessageCutAtItsLimitEndsAtACodePointNotHalfAnEmoji() {
    ConsumerRecord<String, String> record =
        new ConsumerRecord<>("payments", 0, 9, "key", "charge 14.00");
    String head = "a".repeat(KafkaDeadLetterPublisher.MAX_MESSAGE_LENGTH - 1);

    KafkaDeadLetterPublisher.builder(typed)
        .build()
        .deadLetter(record, new IllegalStateException(head + "\uD83D\uDCB3 declined"));

    byte[] header =
        typed
            .history()
            .get(0)
            .headers()
            .lastHeader(KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER)
            .value();
    String message = new String(header, StandardCharsets.UTF_8);
    assertThat(message.substring(message.length() - 3))
        .as("the end of the cut message header")
        .isEqualTo("aaa");
    assertThat(header).as("the header's bytes").isEqualTo(head.getBytes(StandardCharsets.UTF_8));
  }

  @Test
  void deadLettersGoToTheTopicSpringKafkaNamesUnlessAnotherSuffixIsChosen() {
    ConsumerRecord<String, String> record =
        new ConsumerRecord<>("payments", 0, 7, "key", "charge 12.00");

    KafkaDeadLetterPublisher.builder(typed)
        .rawProducer(raw)
        .build()
        .deadLetter(record, new IllegalStateException("declined"));
    KafkaDeadLetterPublisher.builder(typed)
        .rawProducer(raw)
        .topicSuffix(".DLT")
        .build()
        .deadLetter(record, new IllegalStateException("declined"));
    KafkaDeadLetterPublisher.builder(typed)
        .rawProducer(raw)
        .topicSuffix(".DLT")
        .build()
        .deadLetterUndeserializable(rawRecord(), undeserializable());

    assertThat(typed.history())
        .extracting(ProducerRecord::topic)
        .containsExactly("payments-dlt", "payments.DLT");
    assertThat(raw.history()).extracting(ProducerRecord::topic).containsExactly("payments.DLT");
    assertThatThrownBy(() -> KafkaDeadLetterPublisher.builder(typed).topicSuffix(""))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("topicSuffix");
    assertThatThrownBy(() -> KafkaDeadLetterPublisher.builder(typed).topicSuffix(" dlt"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("' dlt'");
  }

  private static ConsumerRecord<byte[], byte[]> rawRecord() {
    return new ConsumerRecord<>(
        "payments",
        2,
        41,
        1_700_000_000_000L,
        TimestampType.CREATE_TIME,
        ConsumerRecord.NULL_SIZE,
        RAW_VALUE.length,
        null,
        RAW_VALUE,
        new RecordHeaders(),
        Optional.empty());
  }

  private static RecordDeserializationException undeserializable() {
    return new RecordDeserializationException(
        RecordDeserializationException.DeserializationExceptionOrigin.VALUE,
        new TopicPartition("payments", 2),
        41,
        1_700_000_000_000L,
        TimestampType.CREATE_TIME,
        null,
        java.nio.ByteBuffer.wrap(RAW_VALUE),
        new RecordHeaders(),
        "Error deserializing VALUE for partition payments-2 at offset 41",
        new SerializationException("Size of data received by IntegerDeserializer is not 4"));
  }
}
