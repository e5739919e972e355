package io.consumerdedup.testing;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.stream.IntStream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;

/** Share groups (KIP-932) on the in-JVM broker of {@link TestKafka}. */
public final class TestShareGroups {
  private TestShareGroups() {}

  /**
   * Sets the group's acquisition lock, and has it start at the earliest record (a new share group
   * starts at the latest by default). Call it before the group's first consumer joins.
   */
  public static void configure(String group, Duration lock) {
    alter(
        group,
        List.of(
            set("share.auto.offset.reset", "earliest"),
            set("share.record.lock.duration.ms", String.valueOf(lock.toMillis()))));
  }

  /**
   * As {@link #configure(String, Duration)}, and the group's members heartbeat every {@code
   * heartbeat} (at least 500 ms) instead of the broker's 5 s: a consumer that joins is given its
   * partitions on its next heartbeat, so it gets its first records that much sooner. Heartbeats
   * that often also let the group's assignment settle sooner, which changes what a test of several
   * members on several partitions sees when one of them dies.
   */
  public static void configure(String group, Duration lock, Duration heartbeat) {
    alter(
        group,
        List.of(
            set("share.auto.offset.reset", "earliest"),
            set("share.record.lock.duration.ms", String.valueOf(lock.toMillis())),
            set("share.heartbeat.interval.ms", String.valueOf(heartbeat.toMillis()))));
  }

  /**
   * On a broker of the test's own ({@link TestKafka#startOwn}), at {@code bootstrap}: {@code topic}
   * of one partition, and {@code group} reading it from the start, its members heartbeating every
   * second (a consumer that joins gets its partition on its next heartbeat: every second, not every
   * 5 s).
   */
  public static void createQueue(String bootstrap, String topic, String group) {
    try (Admin admin = admin(bootstrap)) {
      admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    } catch (ExecutionException e) {
      throw new IllegalStateException("Could not create topic " + topic, e);
    }
    alter(
        bootstrap,
        group,
        List.of(
            set("share.auto.offset.reset", "earliest"),
            set("share.heartbeat.interval.ms", "1000")));
  }

  private static void alter(String group, List<AlterConfigOp> settings) {
    alter(TestKafka.bootstrapServers(), group, settings);
  }

  private static void alter(String bootstrap, String group, List<AlterConfigOp> settings) {
    ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
    try (Admin admin = admin(bootstrap)) {
      admin.incrementalAlterConfigs(Map.of(resource, settings)).all().get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    } catch (ExecutionException e) {
      throw new IllegalStateException("Could not configure share group " + group, e);
    }
  }

  /** Settings of a share consumer of {@code group}: String keys and values, small fetches. */
  public static Map<String, Object> consumerConfig(String group) {
    Map<String, Object> config = new HashMap<>();
    config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, TestKafka.bootstrapServers());
    config.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    // A few records per fetch, so that the consumers of one partition share its records.
    config.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 10);
    return config;
  }

  /**
   * Has {@code group} start at the end of partition 0 of {@code topic}, whatever was written to it
   * before: the share group's start offset set there. Call it before the group's first consumer
   * joins.
   */
  public static void startAtEnd(String group, String topic) {
    TopicPartition partition = new TopicPartition(topic, 0);
    try (Admin admin = admin()) {
      admin
          .alterShareGroupOffsets(group, Map.of(partition, TestKafka.endOffset(partition)))
          .all()
          .get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    } catch (ExecutionException e) {
      throw new IllegalStateException("Could not set the offsets of share group " + group, e);
    }
  }

  /** How many consumers are members of the share group now; 0 if it does not exist yet. */
  public static int members(String group) {
    try (Admin admin = admin()) {
      return admin
          .describeShareGroups(List.of(group))
          .describedGroups()
          .get(group)
          .get()
          .members()
          .size();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    } catch (ExecutionException e) {
      return 0; // not known to the coordinator yet
    }
  }

  /**
   * How many records of partition 0 of {@code topic} {@code group} has not acknowledged for good
   * yet (accepted, rejected or archived): a record held by a consumer counts, unlike in {@link
   * #remaining}. The broker's start offset lags behind acknowledgements, this count does not; it is
   * known (not -1) once the group has acknowledged a record of the partition.
   */
  public static long lag(String group, String topic) {
    return lags(group, topic).get(0);
  }

  /**
   * The {@link #lag} of each partition of {@code topic}, by partition; -1 where it is not known.
   */
  private static List<Long> lags(String group, String topic) {
    try (Admin admin = admin()) {
      int partitionCount =
          admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
      List<TopicPartition> partitions =
          IntStream.range(0, partitionCount)
              .mapToObj(partition -> new TopicPartition(topic, partition))
              .toList();
      Map<TopicPartition, SharePartitionOffsetInfo> offsets =
          admin
              .listShareGroupOffsets(
                  Map.of(group, new ListShareGroupOffsetsSpec().topicPartitions(partitions)))
              .partitionsToOffsetInfo(group)
              .get();
      return partitions.stream()
          .map(offsets::get)
          .map(info -> info == null ? -1L : info.lag().orElse(-1L))
          .toList();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    } catch (ExecutionException e) {
      throw new IllegalStateException("Could not read the offsets of share group " + group, e);
    }
  }

  /**
   * What is left in the queue: the records a new consumer of {@code group} acquires within {@code
   * window} (released again). Empty once every record was acknowledged or rejected: at once when
   * the group's lag is 0 on every partition of {@code topic}, as then no record can be acquired
   * again, however long a consumer waited.
   */
  public static List<ConsumerRecord<String, String>> remaining(
      String group, String topic, Duration window) {
    if (lags(group, topic).stream().allMatch(lag -> lag == 0)) {
      return List.of();
    }
    Map<String, Object> config = consumerConfig(group);
    config.put("share.acknowledgement.mode", "explicit");
    List<ConsumerRecord<String, String>> left = new ArrayList<>();
    try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(config)) {
      consumer.subscribe(List.of(topic));
      long deadline = System.nanoTime() + window.toNanos();
      while (System.nanoTime() < deadline) {
        for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
          left.add(record);
          consumer.acknowledge(record, AcknowledgeType.RELEASE);
        }
      }
    }
    return left;
  }

  private static AlterConfigOp set(String name, String value) {
    return new AlterConfigOp(new ConfigEntry(name, value), AlterConfigOp.OpType.SET);
  }

  private static Admin admin() {
    return admin(TestKafka.bootstrapServers());
  }

  private static Admin admin(String bootstrap) {
    Properties properties = new Properties();
    properties.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    return Admin.create(properties);
  }
}
