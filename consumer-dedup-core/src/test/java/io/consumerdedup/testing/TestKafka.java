package io.consumerdedup.testing;

import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
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
      cluster = start();
    }
    return cluster.bootstrapServers();
  }

  private static KafkaClusterTestKit start() {
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
              .setConfigProp("group.initial.rebalance.delay.ms", "0")
              .setConfigProp("auto.create.topics.enable", "true")
              .build();
      started.format();
      started.startup();
      started.waitForReadyBrokers();
      Runtime.getRuntime()
          .addShutdownHook(
              new Thread(
                  () -> {
                    try {
                      started.close();
                    } catch (Exception e) {
                      // The JVM is exiting; the broker's files are temporary.
                    }
                  }));
      return started;
    } catch (Exception e) {
      throw new IllegalStateException("Could not start the in-JVM Kafka broker", e);
    }
  }

  /** Creates topics with the given number of partitions each. */
  public static void createTopics(int partitions, String... names) {
    Properties properties = new Properties();
    properties.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers());
    try (Admin admin = Admin.create(properties)) {
      admin
          .createTopics(
              java.util.Arrays.stream(names)
                  .map(name -> new NewTopic(name, partitions, (short) 1).configs(Map.of()))
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
}
