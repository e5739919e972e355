package io.consumerdedup.kafka;

import java.time.Duration;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.AcknowledgementCommitCallback;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.metrics.KafkaMetric;

/**
 * A real share consumer whose poll, the first time it hands a renewed record back, returns only
 * after {@code stall}: as a loop thread stalled past the acquisition lock (a long GC pause), the
 * record's lock runs out while the loop still counts it as its own.
 */
final class StallingShareConsumer<K, V> implements ShareConsumer<K, V> {
  private final KafkaShareConsumer<K, V> delegate;
  private final Duration stall;
  private final Set<String> seen = new HashSet<>();
  private final AtomicBoolean stalled = new AtomicBoolean();
  private final List<String> acknowledged = new CopyOnWriteArrayList<>();

  StallingShareConsumer(Map<String, Object> config, Duration stall) {
    this.delegate = new KafkaShareConsumer<>(config);
    this.stall = stall;
  }

  /** What the broker was told, as "offset/delivery TYPE", RENEW left out. */
  List<String> acknowledged() {
    return acknowledged;
  }

  /** Whether the stall happened. */
  boolean stalled() {
    return stalled.get();
  }

  @Override
  public ConsumerRecords<K, V> poll(Duration timeout) {
    ConsumerRecords<K, V> polled = delegate.poll(timeout);
    boolean renewedBack = false;
    for (ConsumerRecord<K, V> record : polled) {
      String delivery = record.offset() + "/" + record.deliveryCount().orElse((short) 0);
      renewedBack |= !seen.add(delivery);
    }
    if (renewedBack && stalled.compareAndSet(false, true)) {
      try {
        Thread.sleep(stall.toMillis());
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    return polled;
  }

  @Override
  public Set<String> subscription() {
    return delegate.subscription();
  }

  @Override
  public void subscribe(Collection<String> topics) {
    delegate.subscribe(topics);
  }

  @Override
  public void unsubscribe() {
    delegate.unsubscribe();
  }

  @Override
  public void acknowledge(ConsumerRecord<K, V> record) {
    delegate.acknowledge(record);
  }

  @Override
  public void acknowledge(ConsumerRecord<K, V> record, AcknowledgeType type) {
    delegate.acknowledge(record, type);
    if (type != AcknowledgeType.RENEW) {
      acknowledged.add(
          record.offset() + "/" + record.deliveryCount().orElse((short) 0) + " " + type.name());
    }
  }

  @Override
  public void acknowledge(String topic, int partition, long offset, AcknowledgeType type) {
    delegate.acknowledge(topic, partition, offset, type);
  }

  @Override
  public Map<TopicIdPartition, Optional<KafkaException>> commitSync() {
    return delegate.commitSync();
  }

  @Override
  public Map<TopicIdPartition, Optional<KafkaException>> commitSync(Duration timeout) {
    return delegate.commitSync(timeout);
  }

  @Override
  public void commitAsync() {
    delegate.commitAsync();
  }

  @Override
  public void setAcknowledgementCommitCallback(AcknowledgementCommitCallback callback) {
    delegate.setAcknowledgementCommitCallback(callback);
  }

  @Override
  public Uuid clientInstanceId(Duration timeout) {
    return delegate.clientInstanceId(timeout);
  }

  @Override
  public Optional<Integer> acquisitionLockTimeoutMs() {
    return delegate.acquisitionLockTimeoutMs();
  }

  @Override
  public Map<MetricName, ? extends Metric> metrics() {
    return delegate.metrics();
  }

  @Override
  public void registerMetricForSubscription(KafkaMetric metric) {
    delegate.registerMetricForSubscription(metric);
  }

  @Override
  public void unregisterMetricFromSubscription(KafkaMetric metric) {
    delegate.unregisterMetricFromSubscription(metric);
  }

  @Override
  public void close() {
    delegate.close();
  }

  @Override
  public void close(Duration timeout) {
    delegate.close(timeout);
  }

  @Override
  public void wakeup() {
    delegate.wakeup();
  }
}
