package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.KEY_HEADER;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Cooperative rebalancing revokes only some of a consumer's partitions; the commit made before they
 * go covers the records done on all of them. When the group refuses that commit (the generation
 * moved on, a rebalance in progress), the offsets of the revoked partitions are their new owner's
 * to re-read, but those of the partitions the consumer keeps were dropped with them: never
 * committed unless more records came, so a restart delivered those records again.
 */
class DedupPollLoopCooperativeRevokeTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_coop_revoke");

  private static final Duration WAIT = Duration.ofSeconds(30);

  private final ExecutorService threads = Executors.newCachedThreadPool();

  @AfterEach
  void tearDown() {
    threads.shutdownNow();
  }

  @Test
  void aCommitRefusedAtACooperativeRevokeIsMadeLaterForThePartitionsThatStay() throws Exception {
    TestKafka.createTopics(2, fixture.topic());
    TopicPartition first = new TopicPartition(fixture.topic(), 0);
    TopicPartition second = new TopicPartition(fixture.topic(), 1);
    send(0, "COOP-0");
    send(1, "COOP-1");

    Set<TopicPartition> revoked = ConcurrentHashMap.newKeySet();
    AtomicBoolean inRevoke = new AtomicBoolean();
    AtomicInteger refusedCommits = new AtomicInteger();
    KafkaConsumer<String, String> consumer =
        new KafkaConsumer<>(cooperative()) {
          @Override
          public void subscribe(Collection<String> topics, ConsumerRebalanceListener listener) {
            super.subscribe(
                topics,
                new ConsumerRebalanceListener() {
                  @Override
                  public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    inRevoke.set(!partitions.isEmpty());
                    try {
                      if (revoked.isEmpty()) {
                        revoked.addAll(partitions); // by the rebalance, not by the close
                      }
                      listener.onPartitionsRevoked(partitions);
                    } finally {
                      inRevoke.set(false);
                    }
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

          @Override
          public void commitSync(Map<TopicPartition, OffsetAndMetadata> offsets) {
            if (inRevoke.get() && refusedCommits.getAndIncrement() == 0) {
              // The group refuses the revocation's commit (its generation moved on meanwhile).
              throw new CommitFailedException();
            }
            super.commitSync(offsets);
          }
        };
    KafkaConsumer<String, String> joining = new KafkaConsumer<>(cooperative());
    Set<TopicPartition> joinedWith = ConcurrentHashMap.newKeySet();
    AtomicBoolean joiningPolls = new AtomicBoolean(true);
    Set<String> handled = ConcurrentHashMap.newKeySet();
    try (IdempotentExecutor executor = IdempotentExecutor.builder(fixture.store()).build()) {
      IdempotentRecordHandler<String, String> handler =
          IdempotentRecordHandler.<String, String>builder(executor)
              .bizType(BIZ_TYPE)
              .key(KeyExtractors.header(KEY_HEADER))
              .handler(
                  record -> {
                    handled.add(LoopFixture.orderNo(record));
                    if (handled.size() == 2) {
                      // Another instance joins once both partitions' records are handled: the
                      // loop's next poll revokes one of them before it commits those records.
                      threads.submit(
                          () -> {
                            joining.subscribe(List.of(fixture.topic()));
                            while (joiningPolls.get()) {
                              joining.poll(Duration.ofMillis(100));
                              joinedWith.addAll(joining.assignment());
                            }
                            joining.close();
                            return null;
                          });
                      Thread.sleep(2_000);
                    }
                  })
              .build();
      DedupPollLoop<String, String> loop =
          LoopFixture.quick(DedupPollLoop.builder(consumer, List.of(fixture.topic()), handler))
              .deadLetterHandler((record, reason) -> {})
              .build();
      Future<?> running = threads.submit(loop);
      await().atMost(WAIT).until(() -> !joinedWith.isEmpty() && !revoked.isEmpty());
      // The loop polls a few times more with the partition it kept, and nothing new on it.
      Thread.sleep(1_000);
      loop.close();
      running.get(WAIT.toSeconds(), TimeUnit.SECONDS);
    } finally {
      joiningPolls.set(false);
    }

    assertThat(handled).as("records handled").containsExactlyInAnyOrder("COOP-0", "COOP-1");
    assertThat(refusedCommits).as("commits made at the revoke").hasPositiveValue();
    Set<TopicPartition> kept = new HashSet<>(List.of(first, second));
    kept.removeAll(revoked);
    assertThat(kept).as("partitions the loop kept through the rebalance").hasSize(1);
    TopicPartition stayed = kept.iterator().next();
    Map<TopicPartition, Long> committed =
        new HashMap<>(TestKafka.committedOffsets(fixture.group()));
    assertThat(committed.get(stayed))
        .as(
            "offset committed for the record handled on %s, which the loop kept (%s revoked)",
            stayed, revoked)
        .isEqualTo(1L);
  }

  private static Map<String, Object> cooperative() {
    Map<String, Object> config = new HashMap<>(TestKafka.consumerConfig(fixture.group()));
    config.put(
        ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
        CooperativeStickyAssignor.class.getName());
    config.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 200);
    return config;
  }

  private static void send(int partition, String orderNo) throws Exception {
    ProducerRecord<String, String> record =
        new ProducerRecord<>(fixture.topic(), partition, null, "charge " + orderNo);
    record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(record).get();
  }
}
