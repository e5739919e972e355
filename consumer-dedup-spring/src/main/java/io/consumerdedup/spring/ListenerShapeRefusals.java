package io.consumerdedup.spring;

import io.consumerdedup.core.DedupMode;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import org.jspecify.annotations.Nullable;
import org.springframework.core.annotation.AnnotatedElementUtils;
import org.springframework.messaging.handler.annotation.SendTo;

/**
 * Listener shapes consumer-dedup cannot protect, refused at start-up with what to write instead: a
 * method the proxy cannot intercept, one whose call returns before its work is done or whose reply
 * a duplicate would miss, and batch listeners whose records cannot be filtered one by one.
 */
final class ListenerShapeRefusals {
  private static final String TAKE_RECORDS =
      "Take List<ConsumerRecord<K, V>> or List<Message<?>> and read payloads and headers from each"
          + " element";

  private ListenerShapeRefusals() {}

  /** Why calls of {@code method} cannot be seen through; null if they can. */
  static @Nullable ListenerRefusal unprotectable(Method method) {
    int modifiers = method.getModifiers();
    if (Modifier.isFinal(modifiers)
        || Modifier.isStatic(modifiers)
        || Modifier.isPrivate(modifiers)) {
      return new ListenerRefusal(
          "the method is "
              + (Modifier.isFinal(modifiers)
                  ? "final"
                  : Modifier.isStatic(modifiers) ? "static" : "private")
              + ", so the proxy cannot intercept it and nothing would be deduplicated",
          "Make it a non-final, non-private instance method (public, protected or"
              + " package-private)");
    }
    for (Class<?> type : method.getParameterTypes()) {
      if (type.getName().equals(ListenerShape.KOTLIN_CONTINUATION)) {
        return new ListenerRefusal(
            "Kotlin suspend functions are not supported (the proxy sees the call return before"
                + " its body runs)",
            "Return a CompletableFuture or a Mono instead");
      }
    }
    if (AnnotatedElementUtils.hasAnnotation(method, SendTo.class)
        || AnnotatedElementUtils.hasAnnotation(method.getDeclaringClass(), SendTo.class)) {
      return new ListenerRefusal(
          "@SendTo is not supported: a duplicate request would get no reply, since the method is"
              + " not invoked again",
          "Send the reply from the method with a KafkaTemplate, keyed by the request, so that a"
              + " requester can wait for the first one");
    }
    return null;
  }

  /**
   * Why a batch listener of this shape cannot be protected; null if it can, or if it is a record
   * listener.
   *
   * @param mode the mode its {@code @Idempotent} sets, or null
   */
  static @Nullable ListenerRefusal batch(ListenerShape shape, @Nullable DedupMode mode) {
    if (!shape.batchListener) {
      return null;
    }
    if (shape.strayBatchParameter != null) {
      return new ListenerRefusal(
          "a batch listener can take only its records, as List<ConsumerRecord<K, V>>,"
              + " List<Message<?>> or ConsumerRecords<K, V>, an Acknowledgment and the"
              + " Consumer: "
              + shape.strayBatchParameter
              + " spans the whole batch and cannot be filtered together with the records"
              + " consumer-dedup leaves out",
          TAKE_RECORDS);
    }
    if (shape.batch == null) {
      return new ListenerRefusal(
          "a batch listener must take its records as List<ConsumerRecord<K, V>>,"
              + " List<Message<?>> or ConsumerRecords<K, V>: a list of payloads cannot be"
              + " matched to the records' keys and filtered",
          TAKE_RECORDS);
    }
    if (shape.returns != ListenerShape.Returns.VALUE) {
      return new ListenerRefusal(
          "a batch listener must finish its work before it returns",
          "Return void, not a future or Mono");
    }
    if (mode == DedupMode.TRANSACTIONAL) {
      return new ListenerRefusal(
          "mode TRANSACTIONAL is not supported for batch listeners: one database transaction"
              + " for the whole batch rolls back the records before a failed one, while"
              + " spring-kafka commits their offsets",
          "Use mode SEPARATE, or a record listener in mode TRANSACTIONAL (one transaction per"
              + " record)");
    }
    return null;
  }
}
