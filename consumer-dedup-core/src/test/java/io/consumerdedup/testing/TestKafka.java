package io.consumerdedup.testing;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.test.KafkaClusterTestKit;
import org.apache.kafka.common.test.TestKitNodes;

/**
 * A real Kafka broker inside the test JVM (KRaft, one combined broker and controller), started once
 * per JVM and shared; each test makes its own topics.
 */
public final class TestKafka {
  private static KafkaClusterTestKit cluster;

  private TestKafka() {}

  /** The broker's bootstrap servers, starting it if needed. */
  public static synchronized String bootstrapServers() {
    if (cluster == null) {
      cluster = startOwn();
    }
    return cluster.bootstrapServers();
  }

  /**
   * Starts a broker configured as the shared one, for a test that breaks it (the caller closes it):
   * the shared broker must stay whole for the other tests of the JVM.
   */
  public static KafkaClusterTestKit startOwn() {
    try {
      KafkaClusterTestKit started =
          new KafkaClusterTestKit.Builder(
                  new TestKitNodes.Builder()
                      .setCombined(true)
                      .setNumBrokerNodes(1)
                      .setNumControllerNodes(1)
                      .build())
              .setConfigProp("offsets.topic.replication.factor", "1")
              .setConfigProp("offsets.topic.num.partitions", "1")
              .setConfigProp("transaction.state.log.replication.factor", "1")
              .setConfigProp("transaction.state.log.min.isr", "1")
              // Tests of a transaction the broker aborts for outliving its timeout wait for this
              // check, which runs every 10 s by default.
              .setConfigProp("transaction.abort.timed.out.transaction.cleanup.interval.ms", "500")
              .setConfigProp("group.initial.rebalance.delay.ms", "0")
              .setConfigProp("auto.create.topics.enable", "true")
              // Share groups (on by default since Kafka 4.2): their state topic on the one broker,
              // and acquisition locks of a few seconds, which share-group tests set per group
              // (TestShareGroups; the broker's floor is 15 s).
              .setConfigProp("share.coordinator.state.topic.replication.factor", "1")
              .setConfigProp("share.coordinator.state.topic.min.isr", "1")
              .setConfigProp("share.coordinator.state.topic.num.partitions", "1")
              .setConfigProp("group.share.min.record.lock.duration.ms", "1000")
              // A group may ask for heartbeats every half second (TestShareGroups): a member is
              // given its partitions on its next heartbeat. The broker's default of 5 s stays the
              // default.
              .setConfigProp("group.share.min.heartbeat.interval.ms", "500")
              .build();
      started.format();
      started.startup();
      started.waitForReadyBrokers();
      return started;
    } catch (Exception e) {
      throw new IllegalStateException("Could not start the in-JVM Kafka broker", e);
    }
  }

  /**
   * Has a broker of {@link #startOwn()} stop answering, as a hung broker or a network that drops
   * packets would: its request handlers stop, its connections stay open, so the clients' requests
   * wait for their timeouts. A broker shut down instead refuses the connections, and the clients'
   * calls fail at once.
   */
  public static void stopAnswering(KafkaClusterTestKit broker) {
    broker.brokers().values().forEach(server -> server.dataPlaneRequestHandlerPool().shutdown());
  }

  /**
   * Closes a broker made to {@link #stopAnswering} on a daemon thread, not waited for: it does not
   * finish its own shutdown (it waits for answers it no longer gives).
   */
  public static void closeUnanswering(KafkaClusterTestKit broker) {
    Thread closer =
        new Thread(
            () -> {
              try {
                broker.close();
              } catch (Exception e) {
                // How the shutdown of a broker that no longer answers ends does not matter.
              }
            },
            "unanswering-broker-close");
    closer.setDaemon(true);
    closer.start();
  }

  /**
   * Stops the broker if it was started. Called by {@link SharedBrokerShutdown} when the test run
   * ends, rather than from a JVM shutdown hook, where a broker stopping while the JVM exits has
   * ended the test JVM with a non-zero status after every test passed.
   */
  static synchronized void stop() throws Exception {
    if (cluster != null) {
      try {
        cluster.close();
      } finally {
        cluster = null;
      }
    }
  }

  /** Creates topics with the given number of partitions each. */
  public static void createTopics(int partitions, String... names) {
    createTopics(partitions, Map.of(), names);
  }

  /** Creates a topic with topic-level settings ({@code max.message.bytes}, ...). */
  public static void createTopic(String name, int partitions, Map<String, String> configs) {
    createTopics(partitions, configs, name);
  }

  private static void createTopics(int partitions, Map<String, String> configs, String... names) {
    Properties properties = new Properties();
    properties.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers());
    try (Admin admin = Admin.create(properties)) {
      admin
          .createTopics(
              java.util.Arrays.stream(names)
                  .map(name -> new NewTopic(name, partitions, (short) 1).configs(configs))
                  .toList())
          .all()
          .get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    } catch (ExecutionException e) {
      throw new IllegalStateException("Could not create topics " + List.of(names), e);
    }
  }

  /**
   * Settings of a consumer in {@code groupId}: String keys and values, no auto-commit, reading from
   * the earliest offset when the group has none.
   */
  public static Map<String, Object> consumerConfig(String groupId) {
    Map<String, Object> config = new HashMap<>();
    config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers());
    config.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
    config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
    config.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    return config;
  }

  /** A producer of String keys and values that waits for all replicas. Close it after use. */
  public static KafkaProducer<String, String> producer() {
    return producer(new StringSerializer(), new StringSerializer());
  }

  /** A producer of raw bytes that waits for all replicas. Close it after use. */
  public static KafkaProducer<byte[], byte[]> rawProducer() {
    return producer(new ByteArraySerializer(), new ByteArraySerializer());
  }

  /** A producer with the given serializers that waits for all replicas. Close it after use. */
  public static <K, V> KafkaProducer<K, V> producer(
      Serializer<K> keySerializer, Serializer<V> valueSerializer) {
    Map<String, Object> config = new HashMap<>();
    config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers());
    config.put(ProducerConfig.ACKS_CONFIG, "all");
    // One request in flight: on a loaded machine the in-JVM broker (Kafka 4.2) answered a retried
    // first batch to a new topic with OUT_OF_ORDER_SEQUENCE_NUMBER without end, and the test's
    // records were never written (seen in CI as a loop that "stopped" 163 records short).
    config.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, 1);
    return new KafkaProducer<>(config, keySerializer, valueSerializer);
  }

  /** The offsets {@code groupId} has committed, by partition; empty if none. */
  public static Map<TopicPartition, Long> committedOffsets(String groupId) {
    Properties properties = new Properties();
    properties.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers());
    try (Admin admin = Admin.create(properties)) {
      return committedOffsets(admin, groupId);
    }
  }

  /**
   * As {@link #committedOffsets(String)}, through {@code admin}: for a caller that looks several
   * times a second and keeps one client rather than making one per look.
   */
  public static Map<TopicPartition, Long> committedOffsets(Admin admin, String groupId) {
    try {
      Map<TopicPartition, OffsetAndMetadata> committed =
          admin.listConsumerGroupOffsets(groupId).partitionsToOffsetAndMetadata().get();
      Map<TopicPartition, Long> offsets = new HashMap<>();
      committed.forEach(
          (partition, offset) -> {
            if (offset != null) {
              offsets.put(partition, offset.offset());
            }
          });
      return offsets;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    } catch (ExecutionException e) {
      throw new IllegalStateException("Could not read the offsets of group " + groupId, e);
    }
  }

  /** The offset the next record written to {@code partition} gets: how many it holds so far. */
  public static long endOffset(TopicPartition partition) {
    Map<String, Object> config = consumerConfig("unused");
    config.remove(ConsumerConfig.GROUP_ID_CONFIG);
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(config)) {
      return consumer.endOffsets(List.of(partition)).get(partition);
    }
  }

  /**
   * Reads every record of {@code topic} written so far: up to the end offsets as the read starts.
   * Once nothing more can write to it (the loops closed, the offsets committed past), that is all a
   * read waiting for one record more would find, without the wait.
   */
  public static List<ConsumerRecord<String, String>> readWritten(String topic) {
    return readWritten(topic, "read_uncommitted");
  }

  /**
   * {@link #readWritten(String)} at an isolation level: under {@code read_committed} up to the last
   * stable offsets (an open transaction's records and those after them are not read yet, aborted
   * ones never).
   */
  public static List<ConsumerRecord<String, String>> readWritten(String topic, String isolation) {
    return readWritten(topic, isolation, new StringDeserializer(), new StringDeserializer());
  }

  /** {@link #readWritten(String)}, returning the records' bytes as stored. */
  public static List<ConsumerRecord<byte[], byte[]>> readRawWritten(String topic) {
    return readWritten(
        topic, "read_uncommitted", new ByteArrayDeserializer(), new ByteArrayDeserializer());
  }

  private static <K, V> List<ConsumerRecord<K, V>> readWritten(
      String topic,
      String isolation,
      Deserializer<K> keyDeserializer,
      Deserializer<V> valueDeserializer) {
    List<ConsumerRecord<K, V>> records = new ArrayList<>();
    try (KafkaConsumer<K, V> consumer = reader(isolation, keyDeserializer, valueDeserializer)) {
      List<TopicPartition> partitions =
          consumer.partitionsFor(topic).stream()
              .map(info -> new TopicPartition(topic, info.partition()))
              .toList();
      consumer.assign(partitions);
      consumer.seekToBeginning(partitions);
      Map<TopicPartition, Long> ends = consumer.endOffsets(partitions);
      long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
      while (partitions.stream().anyMatch(p -> consumer.position(p) < ends.get(p))) {
        if (System.nanoTime() > deadline) {
          throw new IllegalStateException("Could not read " + topic + " up to " + ends);
        }
        consumer.poll(Duration.ofMillis(200)).forEach(records::add);
      }
    }
    return records;
  }

  /**
   * Reads a single-partition topic from its start, outside any group, until {@code count} records
   * arrived or {@code timeout} passed; returns what arrived.
   */
  public static List<ConsumerRecord<String, String>> readFromStart(
      String topic, int count, Duration timeout) {
    return readFromStart(topic, count, timeout, new StringDeserializer(), new StringDeserializer());
  }

  /** {@link #readFromStart(String, int, Duration)}, returning the records' bytes as stored. */
  public static List<ConsumerRecord<byte[], byte[]>> readRawFromStart(
      String topic, int count, Duration timeout) {
    return readFromStart(
        topic, count, timeout, new ByteArrayDeserializer(), new ByteArrayDeserializer());
  }

  private static <K, V> List<ConsumerRecord<K, V>> readFromStart(
      String topic,
      int count,
      Duration timeout,
      Deserializer<K> keyDeserializer,
      Deserializer<V> valueDeserializer) {
    List<ConsumerRecord<K, V>> records = new ArrayList<>();
    try (KafkaConsumer<K, V> consumer =
        reader("read_uncommitted", keyDeserializer, valueDeserializer)) {
      TopicPartition partition = new TopicPartition(topic, 0);
      consumer.assign(List.of(partition));
      consumer.seekToBeginning(List.of(partition));
      long deadline = System.nanoTime() + timeout.toNanos();
      while (records.size() < count && System.nanoTime() < deadline) {
        consumer.poll(Duration.ofMillis(200)).forEach(records::add);
      }
    }
    return records;
  }

  /** A consumer outside any group, to be assigned what it reads. */
  private static <K, V> KafkaConsumer<K, V> reader(
      String isolation, Deserializer<K> keyDeserializer, Deserializer<V> valueDeserializer) {
    Map<String, Object> config = consumerConfig("unused");
    config.remove(ConsumerConfig.GROUP_ID_CONFIG);
    config.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
    return new KafkaConsumer<>(config, keyDeserializer, valueDeserializer);
  }
}
