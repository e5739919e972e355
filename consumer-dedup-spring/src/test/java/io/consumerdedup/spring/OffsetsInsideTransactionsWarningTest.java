package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.kafka.DedupPollLoop;
import io.consumerdedup.spring.internal.MissingKeyArguments;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.jdbc.datasource.SimpleDriverDataSource;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.ContainerProperties.AckMode;
import org.springframework.kafka.listener.KafkaMessageListenerContainer;
import org.springframework.kafka.listener.MessageListener;

/**
 * What an application is told at start-up when a container would commit a record's offset whatever
 * the outcome of the record's database transaction (a database transaction manager on the
 * container: under ack mode {@code RECORD} or {@code MANUAL_IMMEDIATE} the offset is committed
 * before the transaction commits, under the others after the poll even when it rolled back) and
 * consumer-dedup does not wrap its consumers to hold that commit back ({@code
 * consumer-dedup.claims-per-poll=false}): a WARN naming the container, the ack mode and what to
 * change, which is no ack mode (none is safe). Where the consumers are wrapped the commit waits for
 * the transaction ({@link ContainerTransactionOffsetCommitTest}), and nothing is said.
 */
@ExtendWith(OutputCaptureExtension.class)
class OffsetsInsideTransactionsWarningTest {

  @ParameterizedTest
  @EnumSource(AckMode.class)
  void aContainerCommittingInsideItsTransactionWithoutWrappedConsumersIsWarnedOf(
      AckMode ackMode, CapturedOutput output) {
    configure(container("payments", ackMode), false);

    assertThat(output.getAll())
        .contains("WARN")
        .contains("Listener container payments")
        .contains("ack mode " + ackMode)
        .contains("loses the record")
        .contains("keep consumer-dedup.claims-per-poll true")
        .doesNotContain("use ack mode");
  }

  @ParameterizedTest
  @EnumSource(
      value = AckMode.class,
      names = {"RECORD", "BATCH"})
  void nothingIsSaidWhereTheCommitWaitsForTheTransaction(AckMode ackMode, CapturedOutput output) {
    configure(container("wrapped", ackMode), true);

    assertThat(output.getAll()).doesNotContain("loses the record");
  }

  private static void configure(
      KafkaMessageListenerContainer<String, String> container, boolean claimsPerPoll) {
    DedupContainers.configure(
        container,
        DedupPollLoop.DEFAULT_HOLD_BACKOFF,
        DedupPollLoop.DEFAULT_MAX_HOLD_BACKOFF,
        new MissingKeyArguments(Set.of()),
        claimsPerPoll);
  }

  private static KafkaMessageListenerContainer<String, String> container(
      String id, AckMode ackMode) {
    ContainerProperties properties = new ContainerProperties("t");
    properties.setMessageListener((MessageListener<String, String>) record -> {});
    properties.setAckMode(ackMode);
    // Never used: the container is not started.
    properties.setTransactionManager(
        new DataSourceTransactionManager(new SimpleDriverDataSource()));
    KafkaMessageListenerContainer<String, String> container =
        new KafkaMessageListenerContainer<>(
            new DefaultKafkaConsumerFactory<>(Map.of()), properties);
    container.setBeanName(id);
    return container;
  }
}
