package io.consumerdedup.kafka;

import static io.consumerdedup.kafka.LoopFixture.BIZ_TYPE;
import static io.consumerdedup.kafka.LoopFixture.KEY_HEADER;
import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.testing.HandOverErrors;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
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
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * An {@code Error} that repeats (an application short of memory) strikes every time a record's
 * outcome is handed over, the second try too: the claim is open again once its handler has run. The
 * poll's settle gave it back as a claim whose handler never ran, no attempt counted; the loop ended
 * on the Error, and each loop the application started ran the handler again, applying its effect
 * once more, with the record never dead-lettered.
 */
class DedupPollLoopRepeatedHandOverErrorTest {
  @RegisterExtension static final LoopFixture fixture = new LoopFixture("loop_handover");

  private static final int MAX_ATTEMPTS = 2;

  private final ExecutorService threads = Executors.newCachedThreadPool();

  @AfterEach
  void tearDown() throws InterruptedException {
    FaultPoints.install(null);
    threads.shutdownNow();
    threads.awaitTermination(30, TimeUnit.SECONDS);
  }

  @ParameterizedTest(name = "claimsPerPoll {0}")
  @ValueSource(booleans = {true, false})
  void aRecordWhoseOutcomeNeverHandsOverIsDeadLetteredOnceItsAttemptsAreSpent(boolean claimsPerPoll)
      throws Exception {
    TestKafka.createTopics(1, fixture.topic());
    String orderNo = fixture.topic() + "-HO-1";
    ProducerRecord<String, String> charge =
        new ProducerRecord<>(fixture.topic(), 0, null, "charge " + orderNo);
    charge.headers().add(KEY_HEADER, orderNo.getBytes(StandardCharsets.UTF_8));
    fixture.producer().send(charge).get();

    AtomicInteger applied = new AtomicInteger();
    AtomicBoolean handlerRan = new AtomicBoolean();
    AtomicInteger struck = HandOverErrors.strikeWhen(handlerRan::get);
    List<ConsumerRecord<String, String>> deadLettered = new CopyOnWriteArrayList<>();
    List<Throwable> loopEnds = new CopyOnWriteArrayList<>();
    try (IdempotentExecutor executor =
        IdempotentExecutor.builder(fixture.store())
            .lease(Duration.ofSeconds(1))
            .renewalInterval(Duration.ofMillis(300))
            .build()) {
      // The application starts a new loop whenever one ends, as the loop's documentation asks.
      for (int run = 0; run < 2 * MAX_ATTEMPTS + 2 && deadLettered.isEmpty(); run++) {
        DedupPollLoop<String, String> loop =
            LoopFixture.quick(
                    DedupPollLoop.builder(
                        TestKafka.consumerConfig(fixture.group()),
                        List.of(fixture.topic()),
                        IdempotentRecordHandler.<String, String>builder(executor)
                            .bizType(BIZ_TYPE)
                            .key(KeyExtractors.header(KEY_HEADER))
                            .claimsPerPoll(claimsPerPoll)
                            .handler(
                                record -> {
                                  applied.incrementAndGet();
                                  handlerRan.set(true);
                                })
                            .build()))
                .maxAttempts(MAX_ATTEMPTS)
                .closeTimeout(Duration.ofSeconds(10))
                .deadLetterHandler((record, reason) -> deadLettered.add(record))
                .build();
        Future<?> running = threads.submit(loop);
        long giveUp = System.nanoTime() + LoopFixture.WAIT.toNanos();
        while (!running.isDone() && deadLettered.isEmpty() && System.nanoTime() < giveUp) {
          Thread.sleep(50);
        }
        loop.stop(); // still running: it dead-lettered the record, or holds it "in progress"
        try {
          running.get(30, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
          loopEnds.add(e.getCause());
        }
      }
    }

    assertThat(struck).as("hand-overs of an outcome that met the Error").hasPositiveValue();
    assertThat(loopEnds)
        .as("loops that ended on the Error")
        .isNotEmpty()
        .allSatisfy(end -> assertThat(end).isInstanceOf(OutOfMemoryError.class));
    assertThat(applied).as("runs of the handler").hasValueLessThanOrEqualTo(MAX_ATTEMPTS);
    assertThat(deadLettered).as("records dead-lettered").hasSize(1);
  }
}
