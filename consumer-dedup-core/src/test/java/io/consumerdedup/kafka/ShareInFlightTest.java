package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.kafka.ShareInFlight.Decision;
import io.consumerdedup.kafka.ShareInFlight.Id;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.MockShareConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Test;

/**
 * {@link ShareInFlight} when the broker delivers an offset again while the loop still has it out
 * for renewal: the renewal came too late (the loop's thread stalled past the lock) or was refused,
 * and the same consumer acquired the offset anew, one delivery further. A broker cannot be made to
 * hand the same offset back to the same consumer at a chosen moment, so this uses the records a
 * share consumer returns (with their delivery counts) and a consumer that records what is
 * acknowledged.
 */
class ShareInFlightTest {
  private static final String TOPIC = "payments";

  private final Acknowledgements consumer = new Acknowledgements();
  private final ShareInFlight<String, String> inFlight = new ShareInFlight<>(consumer);

  /**
   * The worker decided RELEASE for delivery 4 (the broker allows 5: a retry is left); the offset
   * came back as delivery 5 meanwhile. Sent for delivery 5, that RELEASE had the broker archive the
   * record with no dead letter and no further run: lost without a trace. Delivery 5 must go to the
   * worker, whose decision for it (dead letter, then REJECT) is the one sent.
   */
  @Test
  void anOffsetDeliveredAgainAfterItsLockWasLostIsHandledAsANewDelivery() {
    ConsumerRecord<String, String> fourth = record(7, 4);
    assertThat(inFlight.add(polled(fourth))).containsExactly(fourth);
    assertThat(inFlight.renewHeld(System.nanoTime())).isEqualTo(1);

    ConsumerRecord<String, String> fifth = record(7, 5);
    assertThat(inFlight.add(polled(fifth)))
        .as("delivery 5 is a new delivery for the worker, not the renewed delivery 4")
        .containsExactly(fifth);

    inFlight.decide(new Decision(Id.of(fourth), 4, AcknowledgeType.RELEASE, 0));
    inFlight.acknowledgeDecided(System.nanoTime(), true);
    assertThat(consumer.sent)
        .as("the RELEASE decided for delivery 4 is not sent for delivery 5")
        .containsExactly("7 delivery 4 RENEW");
    assertThat(inFlight.size()).isEqualTo(1);

    inFlight.decide(new Decision(Id.of(fifth), 5, AcknowledgeType.REJECT, 0));
    inFlight.acknowledgeDecided(System.nanoTime(), true);
    assertThat(consumer.sent).containsExactly("7 delivery 4 RENEW", "7 delivery 5 REJECT");
    assertThat(inFlight.isEmpty()).isTrue();
  }

  /** A renewal counts no delivery: the record handed back is the one the worker has. */
  @Test
  void aRenewedRecordComingBackIsNotNewAndGetsItsDecision() {
    ConsumerRecord<String, String> first = record(3, 1);
    assertThat(inFlight.add(polled(first))).containsExactly(first);
    inFlight.renewHeld(System.nanoTime());
    ConsumerRecord<String, String> renewed = record(3, 1);
    assertThat(inFlight.add(polled(renewed))).isEmpty();

    inFlight.decide(new Decision(Id.of(first), 1, AcknowledgeType.ACCEPT, 0));
    inFlight.acknowledgeDecided(System.nanoTime(), false);
    assertThat(consumer.sent).containsExactly("3 delivery 1 RENEW", "3 delivery 1 ACCEPT");
    assertThat(inFlight.isEmpty()).isTrue();
  }

  private static ConsumerRecord<String, String> record(long offset, int deliveryCount) {
    return new ConsumerRecord<>(
        TOPIC,
        0,
        offset,
        0L,
        TimestampType.CREATE_TIME,
        0,
        0,
        null,
        "payment " + offset,
        new RecordHeaders(),
        Optional.empty(),
        Optional.of((short) deliveryCount));
  }

  private static ConsumerRecords<String, String> polled(ConsumerRecord<String, String> record) {
    return new ConsumerRecords<>(Map.of(new TopicPartition(TOPIC, 0), List.of(record)), Map.of());
  }

  /** What was acknowledged, as "offset delivery n TYPE". */
  private static final class Acknowledgements extends MockShareConsumer<String, String> {
    final List<String> sent = new CopyOnWriteArrayList<>();

    @Override
    public synchronized void acknowledge(
        ConsumerRecord<String, String> record, AcknowledgeType type) {
      sent.add(
          record.offset()
              + " delivery "
              + record.deliveryCount().orElse((short) 0)
              + " "
              + type.name());
    }
  }
}
