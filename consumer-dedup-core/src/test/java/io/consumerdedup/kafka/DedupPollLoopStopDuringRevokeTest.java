package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.KEY_HEADER;
import static org.assertj.core.api.Assertions.assertThat;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.LoggerFactory;

/**
 * A stop request that arrives while a rebalance takes the loop's partitions (a rolling restart: the
 * instances leave one after another, and each departure rebalances the others). The stop's wakeup
 * made the revocation's commit throw, and the loop logged a WARN that the offsets of the records
 * just handled were not committed before the partitions were revoked, with the {@code
 * WakeupException}'s stack trace: a failure to look into, where there was only a stop. The wakeup
 * is the stop request: the revocation's commit is made all the same, and the loop stops.
 */
class DedupPollLoopStopDuringRevokeTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_revokestop");

  private static final Duration WAIT = Duration.ofSeconds(30);

  private final ExecutorService threads = Executors.newCachedThreadPool();
  private final Logger loopLog = (Logger) LoggerFactory.getLogger(DedupPollLoop.class);
  private final ListAppender<ILoggingEvent> logged = new ListAppender<>();

  @AfterEach
  void tearDown() {
    loopLog.detachAppender(logged);
    threads.shutdownNow();
  }

  @Test
  void aStopDuringARebalanceCommitsTheRevokedOffsetsWithoutAWarning() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    send("REV-1");
    logged.start();
    loopLog.addAppender(logged);
    AtomicReference<DedupPollLoop<String, String>> loop = new AtomicReference<>();
    AtomicBoolean stopOnRevoke = new AtomicBoolean();
    AtomicBoolean revoked = new AtomicBoolean();
    Map<String, Object> config = new HashMap<>(TestKafka.consumerConfig(fixture.group()));
    config.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 200);
    KafkaConsumer<String, String> consumer =
        new KafkaConsumer<>(config) {
          @Override
          public void subscribe(Collection<String> topics, ConsumerRebalanceListener listener) {
            super.subscribe(
                topics,
                new ConsumerRebalanceListener() {
                  @Override
                  public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    if (stopOnRevoke.get() && !partitions.isEmpty()) {
                      // The stop request arrives as the rebalance takes the partitions.
                      revoked.set(true);
                      loop.get().stop();
                    }
                    listener.onPartitionsRevoked(partitions);
                  }

                  @Override
                  public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    listener.onPartitionsAssigned(partitions);
                  }

                  @Override
                  public void onPartitionsLost(Collection<TopicPartition> partitions) {
                    listener.onPartitionsLost(partitions);
                  }
                });
          }
        };
    KafkaConsumer<String, String> joining =
        new KafkaConsumer<>(TestKafka.consumerConfig(fixture.group()));
    AtomicBoolean joiningPolls = new AtomicBoolean(true);
    try (IdempotentExecutor executor = IdempotentExecutor.builder(fixture.store()).build()) {
      IdempotentRecordHandler<String, String> handler =
          IdempotentRecordHandler.<String, String>builder(executor)
              .bizType(BIZ_TYPE)
              .key(KeyExtractors.header(KEY_HEADER))
              .handler(
                  record -> {
                    // Another instance joins the group while the record is handled: the
                    // loop's next poll revokes its partition before it commits the record.
                    stopOnRevoke.set(true);
                    threads.submit(
                        () -> {
                          joining.subscribe(List.of(fixture.topic()));
                          while (joiningPolls.get()) {
                            joining.poll(Duration.ofMillis(100));
                          }
                          joining.close();
                          return null;
                        });
                    Thread.sleep(2_000);
                  })
              .build();
      loop.set(
          LoopFixture.quick(DedupPollLoop.builder(consumer, List.of(fixture.topic()), handler))
              .deadLetterHandler((record, reason) -> {})
              .build());
      Future<?> running = threads.submit(loop.get());

      running.get(WAIT.toSeconds(), TimeUnit.SECONDS);
      joiningPolls.set(false);

      assertThat(revoked).as("the partition revoked as the stop arrived").isTrue();
      assertThat(TestKafka.committedOffsets(fixture.group()))
          .as("offsets committed for the record handled before the stop")
          .containsEntry(new TopicPartition(fixture.topic(), 0), 1L);
      assertThat(logged.list)
          .filteredOn(event -> event.getLevel().isGreaterOrEqual(Level.WARN))
          .extracting(ILoggingEvent::getFormattedMessage)
          .filteredOn(message -> message.contains("not committed"))
          .as("WARNs and ERRORs of the loop's commits")
          .isEmpty();
    } finally {
      joiningPolls.set(false);
    }
  }

  private static void send(String orderNo) throws Exception {
    ProducerRecord<String, String> record =
        new ProducerRecord<>(fixture.topic(), "charge " + orderNo);
    record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(record).get();
  }
}
