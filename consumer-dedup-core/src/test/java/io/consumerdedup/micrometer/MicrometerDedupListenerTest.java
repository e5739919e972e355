package io.consumerdedup.micrometer;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.consumerdedup.core.DedupKey;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** Two listeners on one registry: an application with a janitor on each of two dedup tables. */
class MicrometerDedupListenerTest {

  @Test
  void aSecondListenerWithTheSameTagsIsRefusedRatherThanShowingTheFirstOnesBacklog() {
    SimpleMeterRegistry registry = new SimpleMeterRegistry();
    MicrometerDedupListener orders = new MicrometerDedupListener(registry);
    MicrometerDedupListener payments = new MicrometerDedupListener(registry);
    orders.purgeBacklog(5, Duration.ofMinutes(1));

    assertThatThrownBy(() -> payments.purgeBacklog(7, Duration.ofMinutes(2)))
        .as("the payments table's backlog, which the registry would show as the orders table's")
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining(MicrometerDedupListener.PURGE_BACKLOG)
        .hasMessageContaining("another MicrometerDedupListener")
        .hasMessageContaining("Tags.of(\"table\"");
    assertThat(registry.get(MicrometerDedupListener.PURGE_BACKLOG).gauge().value()).isEqualTo(5);
  }

  @Test
  void listenersWithTagsOfTheirOwnShowTheirOwnValuesOnEveryMeter() {
    SimpleMeterRegistry registry = new SimpleMeterRegistry();
    MicrometerDedupListener orders =
        new MicrometerDedupListener(registry, Tags.of("table", "orders_dedup"));
    MicrometerDedupListener payments =
        new MicrometerDedupListener(registry, Tags.of("table", "payments_dedup"));

    orders.purgeBacklog(5, Duration.ofMinutes(1));
    payments.purgeBacklog(7, Duration.ofMinutes(2));
    orders.purged(3);
    payments.completed(DedupKey.of("payment", "P-1"), 1, Duration.ofMillis(4));

    assertThat(
            registry
                .get(MicrometerDedupListener.PURGE_BACKLOG)
                .tag("table", "orders_dedup")
                .gauge()
                .value())
        .isEqualTo(5);
    assertThat(
            registry
                .get(MicrometerDedupListener.PURGE_BACKLOG)
                .tag("table", "payments_dedup")
                .gauge()
                .value())
        .isEqualTo(7);
    assertThat(
            registry
                .get(MicrometerDedupListener.PURGE_OLDEST_EXPIRED)
                .tag("table", "payments_dedup")
                .timeGauge()
                .value(TimeUnit.MINUTES))
        .isEqualTo(2);
    assertThat(
            registry
                .get(MicrometerDedupListener.PURGED)
                .tag("table", "orders_dedup")
                .counter()
                .count())
        .isEqualTo(3);
    assertThat(
            registry
                .get(MicrometerDedupListener.OUTCOMES)
                .tags("table", "payments_dedup", "outcome", "processed")
                .counter()
                .count())
        .isEqualTo(1);
  }
}
