package io.consumerdedup.kafka.internal;

import io.consumerdedup.core.internal.DeliverySources;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;

/** How a record is named in records, logs and exceptions. */
public final class RecordSources {
  private RecordSources() {}

  /** {@code topic-partition@offset}. */
  public static String coordinates(ConsumerRecord<?, ?> record) {
    return record.topic() + "-" + record.partition() + "@" + record.offset();
  }

  /** {@code topic-partition@offset}, followed by {@code (group g)} when the group is known. */
  public static String describe(ConsumerRecord<?, ?> record, @Nullable String groupId) {
    return DeliverySources.withGroup(coordinates(record), groupId);
  }
}
