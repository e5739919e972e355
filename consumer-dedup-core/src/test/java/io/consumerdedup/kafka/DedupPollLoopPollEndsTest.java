package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.KEY_HEADER;
import static io.consumerdedup.kafka.LoopFixture.WAIT;
import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * An {@link Error} from the two ends of a poll, a processor's {@code prepare} or {@code settle} (a
 * metrics wrapper around the handler meeting a {@code NoClassDefFoundError}, an {@code
 * OutOfMemoryError} in a buffered sink): the poll is settled all the same, and nothing is committed
 * past a record whose outcome is not known to be recorded, as when they throw a RuntimeException.
 */
class DedupPollLoopPollEndsTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_poll_ends");

  private static final Duration RENEWAL = Duration.ofMillis(300);

  private final Map<String, AtomicInteger> effects = new ConcurrentHashMap<>();
  private final List<ConsumerRecord<String, String>> deadLettered = new CopyOnWriteArrayList<>();
  private final ExecutorService threads = Executors.newCachedThreadPool();

  @AfterEach
  void tearDown() throws InterruptedException {
    threads.shutdownNow();
    threads.awaitTermination(30, TimeUnit.SECONDS);
  }

  private DedupPollLoop<String, String> loop(RecordProcessor<String, String> processor) {
    return LoopFixture.quick(
            DedupPollLoop.builder(
                TestKafka.consumerConfig(fixture.group()), List.of(fixture.topic()), processor))
        .closeTimeout(Duration.ofSeconds(10))
        .deadLetterHandler((record, reason) -> deadLettered.add(record))
        .build();
  }

  private void send(int from, int to) {
    for (int i = from; i < to; i++) {
      ProducerRecord<String, String> record =
          new ProducerRecord<>(fixture.topic(), 0, order(i), "charge " + order(i));
      record.headers().add(KEY_HEADER, order(i).getBytes(StandardCharsets.UTF_8));
      fixture.producer().send(record);
    }
    fixture.producer().flush();
  }

  private static String order(int i) {
    return fixture.topic() + "-ORD-" + i;
  }

  private static Throwable endOf(Future<?> run) throws Exception {
    try {
      run.get(WAIT.toSeconds(), TimeUnit.SECONDS);
    } catch (ExecutionException e) {
      return e.getCause();
    }
    throw new AssertionError("run() returned normally");
  }

  /** The keys 0 until {@code count} that are PROCESSING. */
  private static List<String> processing(int count) {
    List<String> keys = new ArrayList<>();
    for (int i = 0; i < count; i++) {
      fixture
          .store()
          .find(DedupKey.of(BIZ_TYPE, order(i)))
          .filter(r -> r.status() == DedupStatus.PROCESSING)
          .map(DedupRecord::key)
          .ifPresent(key -> keys.add(key.bizKey()));
    }
    return keys;
  }

  @Test
  void anErrorFromPrepareAfterTheHandlerClaimedThePollGivesTheClaimsBack() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    send(0, 5);
    TopicPartition partition = new TopicPartition(fixture.topic(), 0);
    AtomicBoolean thrown = new AtomicBoolean();
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(fixture.store())
            .lease(Duration.ofSeconds(3))
            .renewalInterval(RENEWAL)
            .build()) {
      IdempotentRecordHandler<String, String> handler =
          LoopFixture.handler(executor)
              .handler(
                  record ->
                      effects
                          .computeIfAbsent(LoopFixture.orderNo(record), k -> new AtomicInteger())
                          .incrementAndGet())
              .build();
      // A metrics wrapper, as an application puts around the handler: its own bookkeeping after
      // the handler claimed the poll meets a class missing at run time, once.
      RecordProcessor<String, String> measured =
          new RecordProcessor<>() {
            @Override
            public void prepare(List<ConsumerRecord<String, String>> records) {
              handler.prepare(records);
              if (thrown.compareAndSet(false, true)) {
                throw new NoClassDefFoundError("io/micrometer/core/instrument/Timer");
              }
            }

            @Override
            public Outcome process(ConsumerRecord<String, String> record) {
              return handler.process(record);
            }

            @Override
            public List<ConsumerRecord<String, String>> settle() {
              return handler.settle();
            }
          };

      assertThat(endOf(threads.submit(loop(measured))))
          .as("run() ends with the wrapper's Error")
          .isInstanceOf(NoClassDefFoundError.class);
      // The executor lives on (the application starts a new loop): a claim nobody gives back is
      // renewed for as long as it does, and no consumer may handle its key meanwhile.
      Thread.sleep(RENEWAL.multipliedBy(4).toMillis());
      assertThat(processing(5)).as("keys left PROCESSING after the loop ended").isEmpty();

      // A new loop on another thread, as an application restarting its consumer.
      Thread restarted = new Thread(loop(measured), "restarted-loop");
      restarted.start();
      try {
        LoopFixture.awaitCommitted(fixture.group(), Map.of(partition, 5L));
      } finally {
        restarted.interrupt();
        restarted.join(WAIT.toMillis());
      }
    }
    assertThat(effects).hasSize(5);
    assertThat(effects.values()).allSatisfy(n -> assertThat(n).hasValue(1));
    assertThat(deadLettered).isEmpty();
  }

  @Test
  void anErrorFromSettleDeliversThePollAgainInsteadOfMovingPastIt() throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    send(0, 5);
    TopicPartition partition = new TopicPartition(fixture.topic(), 0);
    // A processor that records its outcomes at settle (a buffered sink); its first flush meets an
    // Error, the buffer lost with it.
    List<String> sink = new CopyOnWriteArrayList<>();
    AtomicBoolean failed = new AtomicBoolean();
    RecordProcessor<String, String> buffered =
        new RecordProcessor<>() {
          private final List<String> buffer = new ArrayList<>();

          @Override
          public Outcome process(ConsumerRecord<String, String> record) {
            buffer.add(LoopFixture.orderNo(record));
            return Outcome.PROCESSED;
          }

          @Override
          public List<ConsumerRecord<String, String>> settle() {
            List<String> flushed = List.copyOf(buffer);
            buffer.clear();
            if (!flushed.isEmpty() && failed.compareAndSet(false, true)) {
              throw new OutOfMemoryError("Java heap space (injected)");
            }
            sink.addAll(flushed);
            return List.of();
          }
        };

    assertThat(endOf(threads.submit(loop(buffered))))
        .as("run() ends with the settle's Error")
        .isInstanceOf(OutOfMemoryError.class);
    try (RunningLoop loop = RunningLoop.start(loop(buffered))) {
      LoopFixture.awaitCommitted(fixture.group(), Map.of(partition, 5L));
    }
    List<String> expected = new ArrayList<>();
    for (int i = 0; i < 5; i++) {
      expected.add(order(i));
    }
    assertThat(sink).as("records whose outcome the failed settle lost").containsAll(expected);
  }
}
