package io.consumerdedup.testing;

import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.AppenderBase;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;
import org.slf4j.LoggerFactory;

/**
 * A logger whose lines that start with a prefix throw, as an appender does that runs out of memory
 * formatting them, until closed.
 */
public final class ThrowingLog implements AutoCloseable {
  private final Logger logger;
  private final AtomicInteger threw = new AtomicInteger();
  private final AppenderBase<ILoggingEvent> appender;

  private ThrowingLog(String loggerName, String prefix, Supplier<? extends Error> error) {
    logger = (Logger) LoggerFactory.getLogger(loggerName);
    appender =
        new AppenderBase<>() {
          @Override
          protected void append(ILoggingEvent event) {
            if (event.getMessage().startsWith(prefix)) {
              threw.incrementAndGet();
              throw error.get();
            }
          }
        };
  }

  /** Makes each line of {@code loggerName} that starts with {@code prefix} throw {@code error}. */
  public static ThrowingLog on(String loggerName, String prefix, Supplier<? extends Error> error) {
    ThrowingLog log = new ThrowingLog(loggerName, prefix, error);
    log.appender.start();
    log.logger.addAppender(log.appender);
    return log;
  }

  /** How many lines threw. */
  public int threw() {
    return threw.get();
  }

  @Override
  public void close() {
    logger.detachAppender(appender);
  }
}
