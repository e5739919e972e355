package io.consumerdedup.spring.internal;

import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.OptionalLong;
import java.util.Set;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.consumer.OffsetCommitCallback;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.jspecify.annotations.Nullable;

/**
 * A {@link Consumer} that hands every call to another one, so that a subclass overrides only the
 * calls it changes ({@link PollAwareConsumer}: polling, committing, subscribing and closing).
 */
abstract class ForwardingConsumer<K, V> implements Consumer<K, V> {
  protected final Consumer<K, V> delegate;

  ForwardingConsumer(Consumer<K, V> delegate) {
    this.delegate = Objects.requireNonNull(delegate, "delegate");
  }

  /** The consumer this one wraps. */
  public Consumer<K, V> delegate() {
    return delegate;
  }

  @Override
  public ConsumerRecords<K, V> poll(Duration timeout) {
    return delegate.poll(timeout);
  }

  @Override
  public void commitSync() {
    delegate.commitSync();
  }

  @Override
  public void commitSync(Duration timeout) {
    delegate.commitSync(timeout);
  }

  @Override
  public void commitSync(Map<TopicPartition, OffsetAndMetadata> offsets) {
    delegate.commitSync(offsets);
  }

  @Override
  public void commitSync(Map<TopicPartition, OffsetAndMetadata> offsets, Duration timeout) {
    delegate.commitSync(offsets, timeout);
  }

  @Override
  public void commitAsync() {
    delegate.commitAsync();
  }

  @Override
  public void commitAsync(@Nullable OffsetCommitCallback callback) {
    delegate.commitAsync(callback);
  }

  @Override
  public void commitAsync(
      Map<TopicPartition, OffsetAndMetadata> offsets, @Nullable OffsetCommitCallback callback) {
    delegate.commitAsync(offsets, callback);
  }

  @Override
  public void subscribe(Collection<String> topics) {
    delegate.subscribe(topics);
  }

  @Override
  public void subscribe(Collection<String> topics, ConsumerRebalanceListener callback) {
    delegate.subscribe(topics, callback);
  }

  @Override
  public void subscribe(Pattern pattern, ConsumerRebalanceListener callback) {
    delegate.subscribe(pattern, callback);
  }

  @Override
  public void subscribe(Pattern pattern) {
    delegate.subscribe(pattern);
  }

  @Override
  public void subscribe(SubscriptionPattern pattern, ConsumerRebalanceListener callback) {
    delegate.subscribe(pattern, callback);
  }

  @Override
  public void subscribe(SubscriptionPattern pattern) {
    delegate.subscribe(pattern);
  }

  @Override
  public void close() {
    delegate.close();
  }

  @Override
  @SuppressWarnings("deprecation")
  public void close(Duration timeout) {
    delegate.close(timeout);
  }

  @Override
  public void close(CloseOptions option) {
    delegate.close(option);
  }

  @Override
  public Set<TopicPartition> assignment() {
    return delegate.assignment();
  }

  @Override
  public Set<String> subscription() {
    return delegate.subscription();
  }

  @Override
  public void assign(Collection<TopicPartition> partitions) {
    delegate.assign(partitions);
  }

  @Override
  public void unsubscribe() {
    delegate.unsubscribe();
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
  public void seek(TopicPartition partition, long offset) {
    delegate.seek(partition, offset);
  }

  @Override
  public void seek(TopicPartition partition, OffsetAndMetadata offsetAndMetadata) {
    delegate.seek(partition, offsetAndMetadata);
  }

  @Override
  public void seekToBeginning(Collection<TopicPartition> partitions) {
    delegate.seekToBeginning(partitions);
  }

  @Override
  public void seekToEnd(Collection<TopicPartition> partitions) {
    delegate.seekToEnd(partitions);
  }

  @Override
  public long position(TopicPartition partition) {
    return delegate.position(partition);
  }

  @Override
  public long position(TopicPartition partition, Duration timeout) {
    return delegate.position(partition, timeout);
  }

  @Override
  public Map<TopicPartition, OffsetAndMetadata> committed(Set<TopicPartition> partitions) {
    return delegate.committed(partitions);
  }

  @Override
  public Map<TopicPartition, OffsetAndMetadata> committed(
      Set<TopicPartition> partitions, Duration timeout) {
    return delegate.committed(partitions, timeout);
  }

  @Override
  public Uuid clientInstanceId(Duration timeout) {
    return delegate.clientInstanceId(timeout);
  }

  @Override
  public Map<MetricName, ? extends Metric> metrics() {
    return delegate.metrics();
  }

  @Override
  public List<PartitionInfo> partitionsFor(String topic) {
    return delegate.partitionsFor(topic);
  }

  @Override
  public List<PartitionInfo> partitionsFor(String topic, Duration timeout) {
    return delegate.partitionsFor(topic, timeout);
  }

  @Override
  public Map<String, List<PartitionInfo>> listTopics() {
    return delegate.listTopics();
  }

  @Override
  public Map<String, List<PartitionInfo>> listTopics(Duration timeout) {
    return delegate.listTopics(timeout);
  }

  @Override
  public Set<TopicPartition> paused() {
    return delegate.paused();
  }

  @Override
  public void pause(Collection<TopicPartition> partitions) {
    delegate.pause(partitions);
  }

  @Override
  public void resume(Collection<TopicPartition> partitions) {
    delegate.resume(partitions);
  }

  @Override
  public Map<TopicPartition, OffsetAndTimestamp> offsetsForTimes(
      Map<TopicPartition, Long> timestampsToSearch) {
    return delegate.offsetsForTimes(timestampsToSearch);
  }

  @Override
  public Map<TopicPartition, OffsetAndTimestamp> offsetsForTimes(
      Map<TopicPartition, Long> timestampsToSearch, Duration timeout) {
    return delegate.offsetsForTimes(timestampsToSearch, timeout);
  }

  @Override
  public Map<TopicPartition, Long> beginningOffsets(Collection<TopicPartition> partitions) {
    return delegate.beginningOffsets(partitions);
  }

  @Override
  public Map<TopicPartition, Long> beginningOffsets(
      Collection<TopicPartition> partitions, Duration timeout) {
    return delegate.beginningOffsets(partitions, timeout);
  }

  @Override
  public Map<TopicPartition, Long> endOffsets(Collection<TopicPartition> partitions) {
    return delegate.endOffsets(partitions);
  }

  @Override
  public Map<TopicPartition, Long> endOffsets(
      Collection<TopicPartition> partitions, Duration timeout) {
    return delegate.endOffsets(partitions, timeout);
  }

  @Override
  public OptionalLong currentLag(TopicPartition partition) {
    return delegate.currentLag(partition);
  }

  @Override
  public ConsumerGroupMetadata groupMetadata() {
    return delegate.groupMetadata();
  }

  @Override
  public void enforceRebalance() {
    delegate.enforceRebalance();
  }

  @Override
  public void enforceRebalance(String reason) {
    delegate.enforceRebalance(reason);
  }

  @Override
  public void wakeup() {
    delegate.wakeup();
  }
}
