package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.KEY_HEADER;
import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.testing.InterceptedStore;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * How many records a crash can leave applied without their SUCCESS, now that marks are written in
 * the background while the loop goes on: per record, only the record in hand (each handler runs
 * once the previous record's SUCCESS is written); with claims per poll, only the records of one
 * poll (a poll's first handler runs once the marks of the poll before are written).
 */
class DedupPollLoopWindowTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_window");

  private static final int RECORDS = 60;

  private final ExecutorService threads = Executors.newCachedThreadPool();
  private final List<String> notYetSuccess = new CopyOnWriteArrayList<>();
  private final List<String> applied = new CopyOnWriteArrayList<>();

  @AfterEach
  void tearDown() throws InterruptedException {
    threads.shutdownNow();
    threads.awaitTermination(30, TimeUnit.SECONDS);
  }

  private void send() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    for (int i = 0; i < RECORDS; i++) {
      String orderNo = fixture.topic() + "-ORD-" + i;
      ProducerRecord<String, String> record =
          new ProducerRecord<>(fixture.topic(), 0, orderNo, "charge " + orderNo);
      record.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
      fixture.producer().send(record);
    }
    fixture.producer().flush();
  }

  private static Optional<DedupStatus> status(String orderNo) {
    return fixture.store().find(DedupKey.of(BIZ_TYPE, orderNo)).map(DedupRecord::status);
  }

  /** Notes each of {@code orderNos} whose SUCCESS is not written now. */
  private void requireSuccess(List<String> orderNos, String when) {
    for (String orderNo : orderNos) {
      if (status(orderNo).orElse(null) != DedupStatus.SUCCESS) {
        notYetSuccess.add(orderNo + " " + when);
      }
    }
  }

  private IdempotentRecordHandler<String, String> handler(
      IdempotentExecutor executor, boolean claimsPerPoll, RecordHandler<String, String> work) {
    return IdempotentRecordHandler.<String, String>builder(executor)
        .bizType(BIZ_TYPE)
        .key(KeyExtractors.header(KEY_HEADER))
        .claimsPerPoll(claimsPerPoll)
        .handler(work)
        .build();
  }

  private void runToTheEnd(RecordProcessor<String, String> processor) throws Exception {
    Map<String, Object> config = TestKafka.consumerConfig(fixture.group());
    config.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 10);
    try (DedupPollLoop<String, String> loop =
        LoopFixture.quick(DedupPollLoop.builder(config, List.of(fixture.topic()), processor))
            .deadLetterHandler(
                (record, reason) -> {
                  throw new AssertionError("nothing should be dead-lettered: " + reason);
                })
            .build()) {
      threads.submit(loop);
      LoopFixture.awaitCommitted(
          fixture.group(), Map.of(new TopicPartition(fixture.topic(), 0), (long) RECORDS));
    }
  }

  /** The fixture's store, whose SUCCESS marks written in groups take 200 ms longer. */
  private static DedupStore slowMarks() {
    return InterceptedStore.before(
        fixture.store(),
        (method, args) -> {
          if (method.getName().equals("completeAll")) {
            try {
              Thread.sleep(200);
            } catch (InterruptedException e) {
              Thread.currentThread().interrupt();
            }
          }
        });
  }

  @Test
  void perRecordEachHandlerRunsOnceThePreviousRecordsSuccessIsWritten() throws Exception {
    send();
    try (IdempotentExecutor executor = IdempotentExecutor.builder(fixture.store()).build()) {
      runToTheEnd(
          handler(
              executor,
              false,
              record -> {
                String orderNo = LoopFixture.orderNo(record);
                if (!applied.isEmpty()) {
                  requireSuccess(
                      List.of(applied.get(applied.size() - 1)), "when " + orderNo + " ran");
                }
                applied.add(orderNo);
              }));
    }

    assertThat(applied).hasSize(RECORDS);
    assertThat(notYetSuccess).isEmpty();
  }

  @Test
  void withClaimsPerPollAPollsFirstHandlerRunsOnceTheLastPollsMarksAreWritten() throws Exception {
    send();
    List<Integer> pollSizes = new CopyOnWriteArrayList<>();
    // Marks that take a while to commit: the next poll is fetched and claimed before they are.
    try (IdempotentExecutor executor = IdempotentExecutor.builder(slowMarks()).build()) {
      IdempotentRecordHandler<String, String> handler =
          handler(executor, true, record -> applied.add(LoopFixture.orderNo(record)));
      // A processor around the handler, as an application's metrics wrapper would be: the loop
      // still fetches and claims a poll while the last one's marks are written.
      runToTheEnd(
          new RecordProcessor<>() {
            private final List<String> earlierPolls = new ArrayList<>();
            private List<String> thisPoll = new ArrayList<>();
            private boolean checked;

            @Override
            public void prepare(List<ConsumerRecord<String, String>> records) {
              earlierPolls.addAll(thisPoll);
              thisPoll = new ArrayList<>();
              checked = false;
              pollSizes.add(records.size());
              handler.prepare(records);
            }

            @Override
            public Outcome process(ConsumerRecord<String, String> record) {
              if (!checked) {
                checked = true;
                requireSuccess(earlierPolls, "when the next poll's first handler ran");
              }
              Outcome outcome = handler.process(record);
              thisPoll.add(LoopFixture.orderNo(record));
              return outcome;
            }

            @Override
            public List<ConsumerRecord<String, String>> settle() {
              return handler.settle();
            }
          });
    }

    assertThat(applied).hasSize(RECORDS);
    assertThat(pollSizes.size()).as("several polls").isGreaterThan(3);
    assertThat(notYetSuccess).isEmpty();
  }
}
