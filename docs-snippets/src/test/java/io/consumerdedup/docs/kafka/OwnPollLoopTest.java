package io.consumerdedup.docs.kafka;

import static io.consumerdedup.docs.DocsKafka.committed;
import static io.consumerdedup.docs.DocsKafka.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.docs.DocsDatabase;
import io.consumerdedup.docs.DocsKafka;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.KeyExtractors;
import io.consumerdedup.testing.TestKafka;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** docs/kafka-clients.md's loops of one's own, run as written against a broker and PostgreSQL. */
class OwnPollLoopTest {
  private DocsDatabase dataSource;
  private JdbcDedupStore store;
  private final List<String> charged = new CopyOnWriteArrayList<>();

  @BeforeEach
  void setUp() {
    dataSource = DocsDatabase.create("docs_own_loop");
    store = JdbcDedupStore.builder(dataSource).build();
  }

  @AfterEach
  void tearDown() {
    dataSource.close();
  }

  @ParameterizedTest(name = "claims per poll: {0}")
  @ValueSource(booleans = {true, false})
  void theLoopChargesEachOrderOnceAndCommitsBehindItsSuccess(boolean claimsPerPoll)
      throws Exception {
    String topic = "own-loop-" + claimsPerPoll;
    String group = "own-loop-" + claimsPerPoll;
    DocsKafka.startGroupAtEnd(group, topic);
    ExecutorService thread = Executors.newSingleThreadExecutor();
    AtomicBoolean running = new AtomicBoolean(true);
    try (IdempotentExecutor executor = IdempotentExecutor.builder(store).build()) {
      IdempotentRecordHandler<String, String> payments =
          IdempotentRecordHandler.<String, String>builder(executor)
              .bizType("payment")
              .key(KeyExtractors.header("order-no"))
              .claimsPerPoll(claimsPerPoll)
              .handler(record -> charged.add(record.value()))
              .build();
      Map<String, Object> config = TestKafka.consumerConfig(group);
      Future<?> polling;
      try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(config)) {
        consumer.subscribe(List.of(topic));
        polling = thread.submit(() -> OwnPollLoop.poll(consumer, payments, running::get));
        send(topic, "OL-1", "order-no", "OL-1-" + claimsPerPoll);
        send(topic, "OL-2", "order-no", "OL-2-" + claimsPerPoll);
        long last = send(topic, "OL-1", "order-no", "OL-1-" + claimsPerPoll); // delivered again
        await().atMost(Duration.ofSeconds(60)).until(() -> committed(group, topic) == last + 1);
        running.set(false);
        polling.get(30, TimeUnit.SECONDS);
      }
    } finally {
      thread.shutdownNow();
    }

    assertThat(charged).containsExactly("OL-1", "OL-2");
    assertThat(store.find(DedupKey.of("payment", "OL-2-" + claimsPerPoll)).orElseThrow().status())
        .isEqualTo(DedupStatus.SUCCESS);
  }

  @Test
  void ordersClaimedOneByOneAreChargedOnceAndSucceededBeforeTheWaitEnds() throws Exception {
    try (IdempotentExecutor executor = IdempotentExecutor.builder(store).build()) {
      List<OwnPollLoop.Order> orders =
          List.of(
              new OwnPollLoop.Order("NC-1", "payments-0@1"),
              new OwnPollLoop.Order("NC-2", "payments-0@2"),
              new OwnPollLoop.Order("NC-1", "payments-0@3"), // a repeat
              new OwnPollLoop.Order("NC-3", "payments-0@4"));

      OwnPollLoop.charge(executor, order -> charged.add(order.number()), orders);

      assertThat(charged).containsExactly("NC-1", "NC-2", "NC-3");
      for (String orderNo : List.of("NC-1", "NC-2", "NC-3")) {
        assertThat(store.find(DedupKey.of("payment", orderNo)).orElseThrow().status())
            .as(orderNo)
            .isEqualTo(DedupStatus.SUCCESS);
      }
    }
  }
}
