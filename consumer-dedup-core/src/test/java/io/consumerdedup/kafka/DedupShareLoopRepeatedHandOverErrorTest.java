package io.consumerdedup.kafka;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.testing.HandOverErrors;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * An {@code Error} that repeats (an application short of memory) strikes every time the outcome of
 * a share group's record is handed over, the claim's second try too; the application starts a new
 * loop whenever one ends on an Error. The record must be neither held "in progress" for good, nor
 * run without end, nor archived by the broker unapplied: its attempts count, and once they are
 * spent it is dead-lettered, then rejected.
 */
class DedupShareLoopRepeatedHandOverErrorTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("share_handover");

  private static final Duration WAIT = Duration.ofSeconds(60);
  private static final int MAX_ATTEMPTS = 2;

  private final ExecutorService threads = Executors.newCachedThreadPool();
  private final KafkaProducer<String, String> dltProducer = TestKafka.producer();
  private final AtomicBoolean restarting = new AtomicBoolean(true);
  private final AtomicReference<DedupShareLoop<String, String>> current = new AtomicReference<>();

  @AfterEach
  void tearDown() throws InterruptedException {
    FaultPoints.install(null);
    restarting.set(false);
    DedupShareLoop<String, String> last = current.get();
    if (last != null) {
      last.close();
    }
    threads.shutdownNow();
    threads.awaitTermination(30, TimeUnit.SECONDS);
    dltProducer.close();
  }

  @ParameterizedTest(name = "handler fails {0}")
  @ValueSource(booleans = {false, true})
  void aRecordWhoseOutcomeNeverHandsOverIsDeadLetteredOnceItsAttemptsAreSpent(boolean fails)
      throws Exception {
    String topic = fixture.topic();
    String group = fixture.group();
    TestKafka.createTopics(1, topic);
    TestShareGroups.configure(group, Duration.ofSeconds(5), Duration.ofSeconds(1));
    String orderNo = "SHO-" + fails; // the store outlives each test
    ProducerRecord<String, String> charge = new ProducerRecord<>(topic, "charge");
    charge.headers().add(LoopFixture.KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(charge).get();

    AtomicInteger runs = new AtomicInteger();
    AtomicInteger loopsEnded = new AtomicInteger();
    AtomicInteger struck = HandOverErrors.strikeWhen(() -> runs.get() > 0);
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(fixture.store()).lease(Duration.ofSeconds(2)).build()) {
      IdempotentRecordHandler<String, String> records =
          IdempotentRecordHandler.<String, String>builder(executor)
              .bizType(LoopFixture.BIZ_TYPE)
              .key(KeyExtractors.header(LoopFixture.KEY_HEADER))
              .groupId(group)
              .handler(
                  record -> {
                    runs.incrementAndGet();
                    if (fails) {
                      throw new IllegalStateException("payment provider says no");
                    }
                  })
              .build();
      // The application starts a new loop whenever one ends on an Error.
      threads.execute(
          () -> {
            while (restarting.get()) {
              DedupShareLoop<String, String> loop =
                  DedupShareLoop.builder(
                          TestShareGroups.consumerConfig(group), List.of(topic), records)
                      .deadLetterHandler(
                          KafkaDeadLetterPublisher.builder(dltProducer).groupId(group).build())
                      .maxAttempts(MAX_ATTEMPTS)
                      .retryBackOff(Duration.ofMillis(100))
                      .holdBackOff(Duration.ofMillis(200), Duration.ofSeconds(1))
                      .closeTimeout(Duration.ofSeconds(10))
                      .build();
              current.set(loop);
              try {
                loop.run();
                return;
              } catch (Error e) {
                loopsEnded.incrementAndGet();
                try {
                  Thread.sleep(1_000);
                } catch (InterruptedException stop) {
                  return;
                }
              }
            }
          });
      List<ConsumerRecord<String, String>> dead = TestKafka.readFromStart(topic + "-dlt", 1, WAIT);
      restarting.set(false);
      current.get().close();

      assertThat(struck).as("hand-overs of an outcome that met the Error").hasPositiveValue();
      assertThat(runs).as("runs of the handler").hasValueLessThanOrEqualTo(MAX_ATTEMPTS);
      assertThat(dead)
          .as("records dead-lettered (loops ended on the Error: " + loopsEnded + ")")
          .extracting(LoopFixture::orderNo)
          .containsExactly(orderNo);
      assertThat(TestShareGroups.remaining(group, topic, Duration.ofSeconds(3)))
          .as("records left in the queue")
          .isEmpty();
    }
  }
}
