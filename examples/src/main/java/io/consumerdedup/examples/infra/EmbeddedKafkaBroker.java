package io.consumerdedup.examples.infra;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.test.KafkaClusterTestKit;
import org.apache.kafka.common.test.TestKitNodes;

/** A real Kafka broker in this JVM (KRaft, one combined broker and controller), for the demo. */
final class EmbeddedKafkaBroker implements AutoCloseable {
  private final KafkaClusterTestKit cluster;

  private EmbeddedKafkaBroker(KafkaClusterTestKit cluster) {
    this.cluster = cluster;
  }

  static EmbeddedKafkaBroker start() throws Exception {
    KafkaClusterTestKit cluster =
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
            // Share groups (the share scenario): their state topic on this one broker.
            .setConfigProp("share.coordinator.state.topic.replication.factor", "1")
            .setConfigProp("share.coordinator.state.topic.min.isr", "1")
            .setConfigProp("share.coordinator.state.topic.num.partitions", "1")
            // A consumer joining an empty group gets its partitions at once.
            .setConfigProp("group.initial.rebalance.delay.ms", "0")
            .build();
    try {
      format(cluster);
      cluster.startup();
      cluster.waitForReadyBrokers();
    } catch (Exception | Error e) {
      // A broker that started its threads and then failed (a port taken, a full disk) would keep
      // them, and with them the JVM, alive.
      try {
        cluster.close();
      } catch (Exception closing) {
        e.addSuppressed(closing);
      }
      throw e;
    }
    return new EmbeddedKafkaBroker(cluster);
  }

  /**
   * Formats the storage with Kafka's formatter, which prints its bootstrap metadata on standard
   * output, amid the demo's progress lines; kept, and printed, only if the formatting fails.
   */
  private static void format(KafkaClusterTestKit cluster) throws Exception {
    PrintStream out = System.out;
    ByteArrayOutputStream printed = new ByteArrayOutputStream();
    System.setOut(new PrintStream(printed, true, StandardCharsets.UTF_8));
    boolean formatted = false;
    try {
      cluster.format();
      formatted = true;
    } finally {
      System.setOut(out);
      if (!formatted) {
        out.print(printed.toString(StandardCharsets.UTF_8));
      }
    }
  }

  String bootstrapServers() {
    return cluster.bootstrapServers();
  }

  @Override
  public void close() throws Exception {
    cluster.close();
  }
}
