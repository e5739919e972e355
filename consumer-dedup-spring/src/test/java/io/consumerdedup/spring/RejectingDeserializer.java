package io.consumerdedup.spring;

import java.nio.ByteBuffer;
import java.util.Map;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.utils.Utils;

/**
 * A {@code StringDeserializer} that rejects what begins with {@link #POISON}: the delegate of a
 * test's {@code ErrorHandlingDeserializer}, for keys or values.
 */
public class RejectingDeserializer extends StringDeserializer {
  static final String POISON = "%%";
  private boolean isKey;

  @Override
  public void configure(Map<String, ?> configs, boolean isKey) {
    super.configure(configs, isKey);
    this.isKey = isKey;
  }

  @Override
  public String deserialize(String topic, byte[] data) {
    String text = super.deserialize(topic, data);
    if (text != null && text.startsWith(POISON)) {
      throw new IllegalArgumentException("poisoned " + (isKey ? "key" : "value") + ": " + text);
    }
    return text;
  }

  /** The form a consumer calls; StringDeserializer's own does not go through the one above. */
  @Override
  public String deserialize(String topic, Headers headers, ByteBuffer data) {
    return deserialize(topic, Utils.toNullableArray(data));
  }
}
