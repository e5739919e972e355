package io.consumerdedup.examples.kafka;

import java.nio.charset.StandardCharsets;
import java.util.StringJoiner;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;

/** How progress lines name records and errors. */
final class RecordText {
  private RecordText() {}

  /** Such as {@code payments@0 [order-no=A-1001]}. */
  static String where(ConsumerRecord<String, String> record) {
    StringJoiner headers = new StringJoiner(", ", " [", "]").setEmptyValue("");
    for (Header header : record.headers()) {
      headers.add(header.key() + "=" + new String(header.value(), StandardCharsets.UTF_8));
    }
    return record.topic() + "@" + record.offset() + headers;
  }

  /** The innermost cause, such as {@code BankTimeoutException: Bank call for A-3001 timed out}. */
  static String rootMessage(Throwable error) {
    Throwable root = error;
    while (root.getCause() != null) {
      root = root.getCause();
    }
    return root.getClass().getSimpleName() + ": " + root.getMessage();
  }
}
