package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.LoggerFactory;

/**
 * What a caller sees when the executor closes under a claim still held: its outcome, which the
 * database does not take, is given up as close() gives up outcomes, and the caller is told so in
 * the executor's own terms.
 */
class ExecutorClosingTest {
  @RegisterExtension static final FaultyStoreFixture db = new FaultyStoreFixture("closing");

  private final ListAppender<ILoggingEvent> logged = new ListAppender<>();
  // The engine's internals, whichever of them reports the outcome.
  private final Logger internals = (Logger) LoggerFactory.getLogger("io.consumerdedup.core");

  @BeforeEach
  void watchTheLog() {
    logged.start();
    internals.addAppender(logged);
  }

  @AfterEach
  void stopWatching() {
    internals.detachAppender(logged);
    db.faulty().proxy().pass();
  }

  private List<String> errorsAbout(String where) {
    return logged.list.stream()
        .filter(event -> event.getLevel() == Level.ERROR)
        .map(ILoggingEvent::getFormattedMessage)
        .filter(message -> message.contains(where))
        .toList();
  }

  @Test
  void aSuccessTheDatabaseRefusesAfterTheExecutorClosedIsGivenUpAsTheCloseGivesUpOutcomes() {
    IdempotentExecutor executor = db.executor(IdempotentExecutor.builder(db.faultyStore().build()));
    DedupKey key = DedupKey.of("payment", "closed-while-handled");
    AtomicInteger charges = new AtomicInteger();

    Throwable thrown =
        catchThrowable(
            () ->
                executor.execute(
                    key,
                    null,
                    "pay-0@11",
                    () -> {
                      charges.incrementAndGet();
                      executor.close(); // the application shuts down meanwhile
                      db.faulty().proxy().refuse(); // and the database is out of reach
                      return null;
                    }));

    assertThat(thrown)
        .as("the caller is told the executor closed before SUCCESS was recorded")
        .isInstanceOf(DedupExecutorClosedException.class)
        .hasMessageContaining("SUCCESS")
        .hasCauseInstanceOf(DedupStoreException.class);
    assertThat(executor.unrecordedOutcomes()).as("nothing retries it any more").isEmpty();
    assertThat(errorsAbout("pay-0@11")).as("ERROR lines naming the delivery").hasSize(1);
    assertThat(charges).hasValue(1);
    db.faulty().proxy().pass();
    assertThat(db.store().find(key).orElseThrow().status())
        .as("left to its lease, as the outcomes a close gives up")
        .isEqualTo(DedupStatus.PROCESSING);
  }

  @Test
  void aFailureTheDatabaseRefusesAfterTheExecutorClosedStillThrowsTheHandlersException() {
    IdempotentExecutor executor = db.executor(IdempotentExecutor.builder(db.faultyStore().build()));
    DedupKey key = DedupKey.of("payment", "closed-while-failing");

    Throwable thrown =
        catchThrowable(
            () ->
                executor.execute(
                    key,
                    null,
                    "pay-0@12",
                    () -> {
                      executor.close();
                      db.faulty().proxy().refuse();
                      throw new IllegalStateException("bank timed out");
                    }));

    assertThat(thrown)
        .as("the handler's own exception, with why FAILED is not recorded")
        .isInstanceOf(IllegalStateException.class)
        .hasMessage("bank timed out");
    assertThat(thrown.getSuppressed()).singleElement().isInstanceOf(DedupStoreException.class);
    assertThat(executor.unrecordedOutcomes()).as("nothing retries it any more").isEmpty();
    assertThat(errorsAbout("pay-0@12")).as("ERROR lines naming the delivery").hasSize(1);
    db.faulty().proxy().pass();
    assertThat(db.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.PROCESSING);
  }
}
