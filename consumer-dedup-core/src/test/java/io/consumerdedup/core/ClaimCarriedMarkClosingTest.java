package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.testing.StoreFixture;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.LoggerFactory;

/**
 * A SUCCESS mark left for its thread's next claim ({@code completeWithNextClaim}) is on its way
 * with that claim as the executor closes. The close gave it up under that write: an ERROR said it
 * was not recorded and that another consumer might run the handler again, its future failed, and
 * the claim's commit then recorded it.
 */
class ClaimCarriedMarkClosingTest {
  @RegisterExtension static final StoreFixture db = new StoreFixture("carriedmark", 4);

  private final ListAppender<ILoggingEvent> logged = new ListAppender<>();
  private final Logger internals = (Logger) LoggerFactory.getLogger("io.consumerdedup.core");

  @BeforeEach
  void watchTheLog() {
    logged.start();
    internals.addAppender(logged);
  }

  @AfterEach
  void stopWatching() {
    internals.detachAppender(logged);
    FaultPoints.install(null);
  }

  @Test
  void aMarkOnItsWayWithTheNextClaimAsTheExecutorClosesIsLeftToThatClaim() throws Exception {
    IdempotentExecutor executor = db.executor(IdempotentExecutor.builder(db.store()));
    DedupKey handled = DedupKey.of("payment", "carried-at-close");
    DedupKey next = DedupKey.of("payment", "carrying-at-close");
    CountDownLatch onItsWay = new CountDownLatch(1);
    CountDownLatch mayGoOn = new CountDownLatch(1);
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.BEFORE_SUCCESS_MARK
              && Thread.currentThread().getName().equals("poll-loop")) {
            onItsWay.countDown();
            try {
              mayGoOn.await(10, TimeUnit.SECONDS); // the statement on the wire
            } catch (InterruptedException e) {
              Thread.currentThread().interrupt();
            }
          }
        });
    CompletableFuture<CompletableFuture<Void>> marked = new CompletableFuture<>();
    Thread pollLoop =
        new Thread(
            () -> {
              DedupClaim claim = executor.claim(handled, null, "pay-0@30");
              marked.complete(claim.completeWithNextClaim());
              try {
                executor.claim(next, null, "pay-0@31");
              } catch (RuntimeException closedMeanwhile) {
                // the executor closed under the claim: not what this test looks at
              }
            },
            "poll-loop");
    pollLoop.start();
    assertThat(onItsWay.await(10, TimeUnit.SECONDS)).as("the mark on its way").isTrue();

    executor.close();
    mayGoOn.countDown();
    pollLoop.join(10_000);

    assertThat(marked.get(10, TimeUnit.SECONDS))
        .as("the mark's future")
        .succeedsWithin(Duration.ofSeconds(10));
    assertThat(db.store().find(handled).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(errorsAbout("pay-0@30")).as("ERROR lines naming the delivery").isEmpty();
  }

  private List<String> errorsAbout(String where) {
    return logged.list.stream()
        .filter(event -> event.getLevel() == Level.ERROR)
        .map(ILoggingEvent::getFormattedMessage)
        .filter(message -> message.contains(where))
        .toList();
  }
}
