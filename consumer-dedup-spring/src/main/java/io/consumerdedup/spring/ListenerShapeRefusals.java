package io.consumerdedup.spring;

import io.consumerdedup.core.DedupMode;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.Future;
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
    ListenerRefusal unawaited = unawaitedWork(method.getReturnType());
    if (unawaited != null) {
      return unawaited;
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
   * Why a method returning {@code type} returns before its work is done, with nothing that waits
   * for that work; null if spring-kafka and consumer-dedup wait for it (a {@code CompletionStage},
   * a {@code Mono}) or it is a plain value. spring-kafka drops any other value when there is no
   * reply topic: the call returned, so SUCCESS was recorded for work that a {@code Flux} never
   * started (nobody subscribes to it) or whose failure nobody heard of (a bare {@code Future}), and
   * every later delivery of the key, a replay after a fix included, was skipped as a duplicate.
   */
  private static @Nullable ListenerRefusal unawaitedWork(Class<?> type) {
    String why = null;
    if (CompletionStage.class.isAssignableFrom(type)
        || isOrExtends(type, "reactor.core.publisher.Mono")) {
      return null;
    }
    if (isOrExtends(type, "org.reactivestreams.Publisher")) {
      why = "spring-kafka subscribes to no " + type.getName() + ", so its work would never run";
    } else if (Future.class.isAssignableFrom(type)) {
      why =
          "spring-kafka does not wait for a "
              + type.getName()
              + " that is no CompletionStage, so its work would be recorded done before it ran,"
              + " and its failure never seen";
    }
    return why == null
        ? null
        : new ListenerRefusal(
            why + " (SUCCESS is recorded as the method returns)",
            "Return a Mono or a CompletableFuture (completed when the work is), or do the work in"
                + " the method and return void");
  }

  /** Whether {@code type} is, or extends or implements, the type named {@code name}. */
  private static boolean isOrExtends(Class<?> type, String name) {
    for (Class<?> c = type; c != null; c = c.getSuperclass()) {
      if (c.getName().equals(name)) {
        return true;
      }
      for (Class<?> implemented : c.getInterfaces()) {
        if (isOrExtends(implemented, name)) {
          return true;
        }
      }
    }
    return false;
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
