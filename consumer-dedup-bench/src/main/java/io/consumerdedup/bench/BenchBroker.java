package io.consumerdedup.bench;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.test.KafkaClusterTestKit;
import org.apache.kafka.common.test.TestKitNodes;

/**
 * A Kafka broker in this JVM (KRaft, one combined broker and controller, Kafka's test kit, set up
 * as the core's tests set up theirs), started for one benchmark and stopped by {@link #close()}.
 *
 * <p>The benchmark does not use the tests' shared broker ({@code TestKafka}): that one is stopped
 * only when a JUnit session ends, and a program that exits with it still running races its
 * temporary directory's deletion, which makes the broker halt the JVM with status 1.
 */
final class BenchBroker implements AutoCloseable {
  private final KafkaClusterTestKit cluster;

  private BenchBroker(KafkaClusterTestKit cluster) {
    this.cluster = cluster;
  }

  static BenchBroker start() throws Exception {
    KafkaClusterTestKit cluster =
        new KafkaClusterTestKit.Builder(
                new TestKitNodes.Builder()
                    .setCombined(true)
                    .setNumBrokerNodes(1)
                    .setNumControllerNodes(1)
                    .build())
            .setConfigProp("offsets.topic.replication.factor", "1")
            .setConfigProp("offsets.topic.num.partitions", "1")
            // A consumer joining an empty group gets its partitions at once.
            .setConfigProp("group.initial.rebalance.delay.ms", "0")
            // The share groups of V9, V10 and V11: their state topic on the one broker.
            .setConfigProp("share.coordinator.state.topic.replication.factor", "1")
            .setConfigProp("share.coordinator.state.topic.min.isr", "1")
            .setConfigProp("share.coordinator.state.topic.num.partitions", "1")
            // A share consumer gets its assignment with a heartbeat: every second rather than the
            // default 5 s, so that a share variant's run waits less before its first records
            // (its msg/s is timed from the first poll that returned records either way).
            .setConfigProp("group.share.min.heartbeat.interval.ms", "1000")
            .setConfigProp("group.share.heartbeat.interval.ms", "1000")
            .build();
    try {
      cluster.format();
      cluster.startup();
      cluster.waitForReadyBrokers();
    } catch (Exception e) {
      cluster.close();
      throw e;
    }
    return new BenchBroker(cluster);
  }

  /**
   * Creates a topic with {@code partitions} partitions and returns once every partition has a
   * leader: an idempotent producer whose first batch meets NOT_LEADER_OR_FOLLOWER on a partition
   * that is still being created can end up retrying OUT_OF_ORDER_SEQUENCE_NUMBER without end.
   */
  void createTopic(String name, int partitions) throws ExecutionException, InterruptedException {
    try (Admin admin =
        Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers()))) {
      admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1))).all().get();
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      while (!allPartitionsLed(admin, name, partitions)) {
        if (System.nanoTime() > deadline) {
          throw new IllegalStateException("Topic " + name + " has partitions without a leader");
        }
        Thread.sleep(50);
      }
    }
  }

  private static boolean allPartitionsLed(Admin admin, String topic, int partitions)
      throws InterruptedException {
    try {
      TopicDescription description =
          admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
      return description != null
          && description.partitions().size() == partitions
          && description.partitions().stream().allMatch(p -> p.leader() != null);
    } catch (ExecutionException notYetKnown) {
      return false;
    }
  }

  /**
   * A producer of String keys and values that waits for the broker's acknowledgement, with one
   * request in flight per connection: a new partition can still refuse the first batch with
   * NOT_LEADER_OR_FOLLOWER after {@link #createTopic} saw its leader (the broker's metadata is
   * updated before its replica manager), and with more in flight a later batch was written first
   * and the retried first one met OUT_OF_ORDER_SEQUENCE_NUMBER without end (seen on a loaded
   * machine).
   */
  KafkaProducer<String, String> producer() {
    return new KafkaProducer<>(
        Map.of(
            ProducerConfig.BOOTSTRAP_SERVERS_CONFIG,
            bootstrapServers(),
            ProducerConfig.ACKS_CONFIG,
            "all",
            ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION,
            1),
        new StringSerializer(),
        new StringSerializer());
  }

  /**
   * Settings of a consumer in {@code groupId}: String keys and values, no auto-commit (the loops
   * commit), reading from the earliest offset.
   */
  Map<String, Object> consumerConfig(String groupId) {
    Map<String, Object> config = new HashMap<>();
    config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers());
    config.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
    config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
    config.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    return config;
  }

  /**
   * Settings of a share consumer in the share group {@code groupId} (String keys and values), the
   * group first set to start at the earliest record (a new share group starts at the latest).
   */
  Map<String, Object> shareConsumerConfig(String groupId) throws Exception {
    try (Admin admin =
        Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers()))) {
      admin
          .incrementalAlterConfigs(
              Map.of(
                  new ConfigResource(ConfigResource.Type.GROUP, groupId),
                  List.of(
                      new AlterConfigOp(
                          new ConfigEntry("share.auto.offset.reset", "earliest"),
                          AlterConfigOp.OpType.SET))))
          .all()
          .get();
    }
    Map<String, Object> config = new HashMap<>();
    config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers());
    config.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
    config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    return config;
  }

  String bootstrapServers() {
    return cluster.bootstrapServers();
  }

  /** Stops the broker and deletes its files. */
  @Override
  public void close() throws Exception {
    cluster.close();
  }
}
