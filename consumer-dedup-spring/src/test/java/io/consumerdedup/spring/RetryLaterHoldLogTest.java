package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import io.consumerdedup.core.DedupExecutorClosedException;
import io.consumerdedup.core.DedupKey;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.slf4j.LoggerFactory;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.kafka.listener.ListenerExecutionFailedException;

/**
 * What an operator reads when a record is held because consumer-dedup's executor closed first (an
 * application shutting down while its container is still in a poll): one WARN line saying the
 * record comes again after the restart. Before, it was an ERROR with a stack trace, read as a
 * failure of a normal shutdown. The log as an application sees it, at INFO.
 */
@ExtendWith(OutputCaptureExtension.class)
class RetryLaterHoldLogTest {
  private final Logger logger = (Logger) LoggerFactory.getLogger(RetryLaterErrorHandler.class);
  private Level level;

  @BeforeEach
  void atInfo() {
    level = logger.getLevel();
    logger.setLevel(Level.INFO);
  }

  @AfterEach
  void restore() {
    logger.setLevel(level);
  }

  @Test
  void aRecordHeldBecauseTheExecutorClosedIsOneWarnLineWithoutAStackTrace(CapturedOutput output) {
    DedupExecutorClosedException closed =
        new DedupExecutorClosedException(
            "IdempotentExecutor app-1 is closed", DedupKey.of("orders", "O-7"), "orders-0@7", null);

    RetryLaterErrorHandler.logHold(
        new ListenerExecutionFailedException("Listener method threw exception", closed),
        "orders-0@7",
        Duration.ofMillis(200));

    List<String> lines = output.getAll().lines().toList();
    assertThat(lines)
        .singleElement()
        .satisfies(
            line ->
                assertThat(line)
                    .contains(" WARN ")
                    .contains("orders-0@7")
                    .contains("executor is closed")
                    .contains("delivered again after the restart"));
  }
}
