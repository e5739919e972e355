package io.consumerdedup.kafka.internal;

import io.consumerdedup.core.internal.FailureTexts;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;

/**
 * Log lines written after what they tell is done (a record kept acquired, or decided), which must
 * not undo it by throwing: a failure whose printing throws is written through a stand-in ({@link
 * FailureTexts#loggable}), and a line that cannot be written at all (a second {@code
 * OutOfMemoryError} as it is, which Logback passes on from its appender) is lost. Thrown on, such a
 * line ended the share worker, or the share listener's keeper, and the records it held were given
 * back or never acknowledged. Each line is built inside the guard, the record's name too: nothing
 * is allocated before it.
 */
public final class LostLines {
  private LostLines() {}

  /** ERROR {@code format}, whose one placeholder is {@code subject}, with {@code failure}. */
  public static void error(Logger log, String format, Object subject, Throwable failure) {
    try {
      log.error(format, subject, FailureTexts.loggable(failure));
    } catch (RuntimeException | Error lost) {
      // The line is lost; what it tells stands.
    }
  }

  /**
   * ERROR {@code format}, whose placeholders are the record's name ({@link RecordSources#describe})
   * and then {@code detail} if not null, with {@code failure}.
   */
  public static void error(
      Logger log,
      String format,
      ConsumerRecord<?, ?> record,
      @Nullable String groupId,
      @Nullable Object detail,
      Throwable failure) {
    try {
      log.error(
          format, RecordSources.describe(record, groupId), detail, FailureTexts.loggable(failure));
    } catch (RuntimeException | Error lost) {
      // The line is lost; what it tells stands.
    }
  }

  /**
   * ERROR {@code format}, whose placeholders are {@code count} and the name of {@code first}, the
   * first of those records, with {@code failure}.
   */
  public static void error(
      Logger log,
      String format,
      int count,
      ConsumerRecord<?, ?> first,
      @Nullable String groupId,
      Throwable failure) {
    try {
      log.error(
          format, count, RecordSources.describe(first, groupId), FailureTexts.loggable(failure));
    } catch (RuntimeException | Error lost) {
      // The line is lost; what it tells stands.
    }
  }

  /** WARN {@code message}, with {@code failure} if not null. */
  public static void warn(Logger log, String message, @Nullable Throwable failure) {
    try {
      if (failure == null) {
        log.warn(message);
      } else {
        log.warn(message, FailureTexts.loggable(failure));
      }
    } catch (RuntimeException | Error lost) {
      // The line is lost; what it tells stands.
    }
  }

  /** WARN {@code format}, whose one placeholder is the record's name. */
  public static void warn(
      Logger log, String format, ConsumerRecord<?, ?> record, @Nullable String groupId) {
    try {
      log.warn(format, RecordSources.describe(record, groupId));
    } catch (RuntimeException | Error lost) {
      // The line is lost; what it tells stands.
    }
  }

  /** WARN {@code format}, whose one placeholder is the record's name, with {@code failure}. */
  public static void warn(
      Logger log,
      String format,
      ConsumerRecord<?, ?> record,
      @Nullable String groupId,
      Throwable failure) {
    try {
      log.warn(format, RecordSources.describe(record, groupId), FailureTexts.loggable(failure));
    } catch (RuntimeException | Error lost) {
      // The line is lost; what it tells stands.
    }
  }
}
