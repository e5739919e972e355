package io.consumerdedup.jdbc;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import java.util.List;
import org.junit.jupiter.api.extension.AfterEachCallback;
import org.junit.jupiter.api.extension.BeforeEachCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * The WARN lines of the given loggers during each test, what an operator reads; registered as a
 * {@code @RegisterExtension}.
 */
final class CapturedWarnings implements BeforeEachCallback, AfterEachCallback {
  private final ListAppender<ILoggingEvent> logged = new ListAppender<>();
  private final List<Logger> loggers;

  CapturedWarnings(String... loggerNames) {
    this.loggers =
        List.of(loggerNames).stream()
            .map(name -> (Logger) org.slf4j.LoggerFactory.getLogger(name))
            .toList();
  }

  @Override
  public void beforeEach(ExtensionContext context) {
    logged.list.clear();
    logged.start();
    loggers.forEach(logger -> logger.addAppender(logged));
  }

  @Override
  public void afterEach(ExtensionContext context) {
    loggers.forEach(logger -> logger.detachAppender(logged));
  }

  /** This test's warnings so far, formatted. */
  List<String> all() {
    return logged.list.stream()
        .filter(event -> event.getLevel() == Level.WARN)
        .map(ILoggingEvent::getFormattedMessage)
        .toList();
  }

  /** Those of them containing {@code text}. */
  List<String> containing(String text) {
    return all().stream().filter(message -> message.contains(text)).toList();
  }
}
