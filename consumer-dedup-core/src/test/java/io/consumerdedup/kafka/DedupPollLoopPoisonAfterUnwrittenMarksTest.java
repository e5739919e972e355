package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.KEY_HEADER;
import static io.consumerdedup.kafka.LoopFixture.WAIT;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RecordDeserializationException;
import org.apache.kafka.common.serialization.IntegerDeserializer;
import org.apache.kafka.common.serialization.IntegerSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * A record the deserializer rejects, met while the SUCCESS marks of the poll before it, on its
 * partition, are not written (the database away for a moment): the partition is held at the first
 * of those records and delivers the bad record again after them, so it is dead-lettered once then,
 * not now and again then.
 */
class DedupPollLoopPoisonAfterUnwrittenMarksTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_poison_marks");

  /** Three bytes where {@link IntegerDeserializer} expects four. */
  private static final byte[] NOT_AN_INTEGER = {0x7f, 0x00, 0x01};

  private final Effects effects = new Effects();
  private final List<Long> deadLettered = new CopyOnWriteArrayList<>();

  private void sendRaw(KafkaProducer<byte[], byte[]> producer, String orderNo, byte[] value)
      throws Exception {
    ProducerRecord<byte[], byte[]> record =
        new ProducerRecord<>(fixture.topic(), 0, orderNo.getBytes(StandardCharsets.UTF_8), value);
    record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    producer.send(record).get();
  }

  @Test
  void aRecordTheDeserializerRejectsIsDeadLetteredOnceThoughHeldBehindUnwrittenMarks()
      throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    TopicPartition partition = new TopicPartition(fixture.topic(), 0);
    try (KafkaProducer<byte[], byte[]> raw = TestKafka.rawProducer();
        IntegerSerializer amounts = new IntegerSerializer()) {
      for (int i = 0; i < 3; i++) {
        sendRaw(raw, "A-" + i, amounts.serialize(fixture.topic(), 100 + i));
      }
      sendRaw(raw, "A-bad", NOT_AN_INTEGER); // offset 3
      sendRaw(raw, "A-4", amounts.serialize(fixture.topic(), 104));
    }
    SuccessRefusingStore refusingStore = new SuccessRefusingStore(fixture.store());
    Map<String, Object> config = TestKafka.consumerConfig(fixture.group());
    config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, IntegerDeserializer.class);
    config.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 3); // the bad record opens the next poll
    DeadLetterHandler<String, Integer> deadLetters =
        new DeadLetterHandler<>() {
          @Override
          public void deadLetter(ConsumerRecord<String, Integer> record, Exception reason) {
            throw new AssertionError("only the bad record is dead-lettered: " + record, reason);
          }

          @Override
          public void deadLetterUndeserializable(
              ConsumerRecord<byte[], byte[]> record, Exception reason) {
            assertThat(reason).isInstanceOf(RecordDeserializationException.class);
            deadLettered.add(record.offset());
          }
        };
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(refusingStore.store())
            .lease(Duration.ofSeconds(5))
            .renewalInterval(Duration.ofMillis(300))
            .build()) {
      IdempotentRecordHandler<String, Integer> handler =
          IdempotentRecordHandler.<String, Integer>builder(executor)
              .bizType(BIZ_TYPE)
              .key(KeyExtractors.header(KEY_HEADER))
              .handler(record -> effects.apply(LoopFixture.orderNo(record)))
              .build();
      DedupPollLoop<String, Integer> loop =
          LoopFixture.quick(DedupPollLoop.builder(config, List.of(fixture.topic()), handler))
              .closeTimeout(Duration.ofSeconds(10))
              .deadLetterHandler(deadLetters)
              .build();
      try (RunningLoop running = RunningLoop.start(loop)) {
        await().atMost(WAIT).until(() -> refusingStore.refusals.get() > 0);
        Thread.sleep(1_000); // the marks refused for a while: the partition held at A-0
        refusingStore.refusing = false;
        LoopFixture.awaitCommitted(fixture.group(), Map.of(partition, 5L));
      }
    }
    assertThat(effects.all())
        .containsOnly(
            Map.entry("A-0", 1), Map.entry("A-1", 1), Map.entry("A-2", 1), Map.entry("A-4", 1));
    assertThat(deadLettered).as("dead letters of the bad record, by offset").containsExactly(3L);
  }
}
