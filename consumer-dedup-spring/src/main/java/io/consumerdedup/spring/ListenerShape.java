package io.consumerdedup.spring;

import io.consumerdedup.spring.internal.ListenerAttributes;
import io.consumerdedup.spring.internal.PollAwareConsumer;
import java.lang.reflect.Constructor;
import java.lang.reflect.Method;
import java.lang.reflect.ParameterizedType;
import java.lang.reflect.Type;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.jspecify.annotations.Nullable;
import org.springframework.beans.factory.BeanFactory;
import org.springframework.beans.factory.config.ConfigurableBeanFactory;
import org.springframework.core.MethodParameter;
import org.springframework.core.ResolvableType;
import org.springframework.core.annotation.AnnotatedElementUtils;
import org.springframework.core.annotation.AnnotatedMethod;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.listener.adapter.ConsumerRecordMetadata;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.kafka.support.KafkaHeaders;
import org.springframework.kafka.support.converter.KafkaMessageHeaders;
import org.springframework.messaging.Message;
import org.springframework.messaging.MessageHeaders;
import org.springframework.messaging.handler.annotation.Headers;
import org.springframework.messaging.handler.annotation.Payload;
import org.springframework.messaging.support.MessageBuilder;
import org.springframework.messaging.support.MessageHeaderAccessor;
import org.springframework.util.ClassUtils;

/**
 * The shape of a listener method, read once from its signature: which argument is the record, the
 * message, the payload, the {@code Acknowledgment} or the batch, as spring-messaging resolves them;
 * the declared type of {@code #payload}; and what the method returns, which decides when its
 * outcome is known and what a duplicate gets instead of a call. Shapes consumer-dedup cannot
 * protect are refused by {@link ListenerShapeRefusals}.
 */
final class ListenerShape {
  static final String KOTLIN_CONTINUATION = "kotlin.coroutines.Continuation";
  private static final boolean REACTOR_PRESENT =
      ClassUtils.isPresent("reactor.core.publisher.Mono", ListenerShape.class.getClassLoader());

  /** What the method returns, which decides when its outcome is known. */
  enum Returns {
    /** A value or nothing: the outcome is known when the method returns. */
    VALUE,
    /** A {@code CompletableFuture} or {@code CompletionStage}: known when it completes. */
    FUTURE,
    /** A Reactor {@code Mono}: known when it completes. */
    MONO
  }

  /** How a batch listener takes its batch: the only forms whose records can be filtered. */
  enum BatchShape {
    /** {@code List<ConsumerRecord<K, V>>}. */
    RECORDS,
    /** {@code List<Message<?>>}, one message per record, in the container's order. */
    MESSAGES,
    /** {@code ConsumerRecords<K, V>}. */
    CONSUMER_RECORDS
  }

  private final Method method;

  final Returns returns;

  /** What a duplicate returns: null, a primitive's zero, or an empty future or Mono. */
  private final Class<?> returnType;

  /** Index of the argument that is the record, or -1. */
  final int recordIndex;

  /** Index of the argument that is a {@code Message<?>}, or -1. */
  private final int messageIndex;

  /** Index of the argument that is the converted payload, or -1 (then the record value). */
  private final int payloadIndex;

  /** Index of the {@code Acknowledgment} argument, or -1. */
  final int ackIndex;

  /** Whether spring-kafka calls it with a whole batch. */
  final boolean batchListener;

  /** How a batch listener takes its records; null for a record listener, or if it does not. */
  final @Nullable BatchShape batch;

  /** Index of the argument that holds the batch, or -1. */
  final int batchIndex;

  /**
   * A batch listener's first parameter besides its records, {@code Acknowledgment} and {@code
   * Consumer}, as a refusal names it; null if there is none.
   */
  final @Nullable String strayBatchParameter;

  /**
   * @param beanFactory resolves the {@code batch} attribute of its {@code @KafkaListener} as
   *     spring-kafka does (placeholders, SpEL); null reads it as written
   */
  ListenerShape(Method method, @Nullable BeanFactory beanFactory) {
    this.method = method;
    this.returnType = method.getReturnType();
    this.returns = returnsOf(returnType);

    // As spring-messaging resolves the arguments: parameter annotations of interfaces count too,
    // and the payload is the @Payload parameter, else the first one no other resolver claims.
    int record = -1;
    int message = -1;
    int ack = -1;
    int annotatedPayload = -1;
    int unclaimed = -1;
    for (MethodParameter parameter : new AnnotatedMethod(method).getMethodParameters()) {
      int i = parameter.getParameterIndex();
      Class<?> type = parameter.getParameterType();
      if (ConsumerRecord.class.isAssignableFrom(type)) {
        record = record < 0 ? i : record;
      } else if (Message.class.isAssignableFrom(type)) {
        message = message < 0 ? i : message;
      } else if (Acknowledgment.class.isAssignableFrom(type)) {
        ack = ack < 0 ? i : ack;
      } else if (parameter.hasParameterAnnotation(Payload.class)) {
        annotatedPayload = annotatedPayload < 0 ? i : annotatedPayload;
      } else if (unclaimed < 0 && !claimedByAnotherResolver(parameter)) {
        unclaimed = i;
      }
    }
    this.recordIndex = record;
    this.messageIndex = message;
    this.ackIndex = ack;
    this.payloadIndex = annotatedPayload >= 0 ? annotatedPayload : unclaimed;

    this.batchListener = isBatch(method, beanFactory);
    int index = -1;
    BatchShape shape = null;
    String stray = null;
    if (batchListener) {
      for (MethodParameter parameter : new AnnotatedMethod(method).getMethodParameters()) {
        BatchShape found = batchShapeOf(parameter.getGenericParameterType());
        Class<?> type = parameter.getParameterType();
        if (found != null && shape == null) {
          shape = found;
          index = parameter.getParameterIndex();
        } else if (stray == null
            && !Acknowledgment.class.isAssignableFrom(type)
            && !Consumer.class.isAssignableFrom(type)) {
          stray =
              found == null
                  ? "its parameter "
                      + parameter.getGenericParameterType().getTypeName()
                      + " (a list of payloads or of @Header values)"
                  : "a second batch parameter";
        }
      }
    }
    this.batch = shape;
    this.batchIndex = index;
    this.strayBatchParameter = stray;
  }

  /**
   * The declared type of {@code #payload}, as a call's key evaluation takes it: a message's
   * payload, the payload argument, else the record's value; for a batch, the element's.
   */
  ResolvableType payloadType() {
    if (batch != null) {
      ResolvableType parameter = ResolvableType.forMethodParameter(method, batchIndex);
      return switch (batch) {
        case RECORDS -> parameter.getGeneric(0).as(ConsumerRecord.class).getGeneric(1);
        case MESSAGES -> parameter.getGeneric(0).as(Message.class).getGeneric(0);
        case CONSUMER_RECORDS -> parameter.as(ConsumerRecords.class).getGeneric(1);
      };
    }
    if (messageIndex >= 0) {
      return ResolvableType.forMethodParameter(method, messageIndex)
          .as(Message.class)
          .getGeneric(0);
    }
    if (payloadIndex >= 0) {
      return ResolvableType.forMethodParameter(method, payloadIndex);
    }
    if (recordIndex >= 0) {
      return ResolvableType.forMethodParameter(method, recordIndex)
          .as(ConsumerRecord.class)
          .getGeneric(1);
    }
    return ResolvableType.NONE;
  }

  /**
   * {@code #payload} of a record listener's call: a message's payload, the payload argument, else
   * the record's value.
   */
  @Nullable Object payload(ConsumerRecord<Object, Object> record, @Nullable Object[] arguments) {
    if (messageIndex >= 0 && arguments[messageIndex] instanceof Message<?> message) {
      return message.getPayload();
    }
    if (payloadIndex >= 0) {
      return arguments[payloadIndex];
    }
    return record.value();
  }

  /**
   * The call's {@code Acknowledgment}: its argument, else the one its message, the message's
   * headers, or the first message of its batch carries ({@code KafkaHeaders.ACKNOWLEDGMENT}), which
   * a listener without the argument reaches instead; null if it has none.
   */
  @Nullable Acknowledgment acknowledgment(@Nullable Object[] arguments) {
    if (ackIndex >= 0 && arguments[ackIndex] instanceof Acknowledgment ack) {
      return ack;
    }
    return carriedAmong(arguments, KafkaHeaders.ACKNOWLEDGMENT) instanceof Acknowledgment ack
        ? ack
        : null;
  }

  /**
   * Hands the listener {@code held} wherever the call carries the container's {@code
   * acknowledgment}, and a consumer holding its commits wherever it carries the container's
   * consumer: in place of the argument, and in the headers of its message, of its headers argument
   * ({@code @Headers Map}, {@code MessageHeaders}, an accessor) and of each message of its batch
   * ({@code KafkaHeaders.ACKNOWLEDGMENT}, {@code KafkaHeaders.CONSUMER}). An acknowledgment or a
   * commit reached through a header that still was the container's committed the offset at once (an
   * acknowledgment under {@code MANUAL_IMMEDIATE}, or before the error handler's seek under {@code
   * MANUAL}), past a record whose call then failed, its key FAILED: a stop or a rebalance before
   * the retry lost the record.
   *
   * @return the consumer whose commits are to be held for this call; null if the call reaches none
   */
  @Nullable PollAwareConsumer<?, ?> handOver(
      @Nullable Object[] arguments,
      @Nullable Acknowledgment acknowledgment,
      @Nullable Acknowledgment held) {
    Object consumer = carriedAmong(arguments, KafkaHeaders.CONSUMER);
    PollAwareConsumer<?, ?> committer = PollAwareConsumer.holdingCommitsAmong(arguments);
    if (committer == null && consumer instanceof Consumer<?, ?> headerConsumer) {
      committer =
          headerConsumer instanceof PollAwareConsumer<?, ?> polled
              ? polled
              : new PollAwareConsumer<>(headerConsumer);
    }
    boolean swapAcknowledgment = acknowledgment != null && held != null;
    boolean swapConsumer = consumer != null && committer != null && consumer != committer;
    if (!swapAcknowledgment && !swapConsumer) {
      return committer; // the quick start's listener: nothing allocated per record
    }
    Map<Object, Object> swaps = new IdentityHashMap<>(4);
    if (swapAcknowledgment) {
      swaps.put(acknowledgment, held);
    }
    if (swapConsumer) {
      swaps.put(consumer, committer);
    }
    for (int i = 0; i < arguments.length; i++) {
      Object argument = arguments[i];
      if (swaps.containsKey(argument)) {
        arguments[i] = swaps.get(argument);
      } else if (i == batchIndex && batch == BatchShape.MESSAGES && argument instanceof List<?> l) {
        List<Object> messages = new ArrayList<>(l.size());
        for (Object element : l) {
          messages.add(swapped(element, swaps));
        }
        arguments[i] = messages;
      } else {
        arguments[i] = swapped(argument, swaps);
      }
    }
    return committer;
  }

  /**
   * {@code argument} with the values of {@code swaps} in place of its acknowledgment and consumer
   * headers that are among their keys; the argument itself if it carries none.
   */
  private static @Nullable Object swapped(@Nullable Object argument, Map<Object, Object> swaps) {
    if (!(argument instanceof Message<?>
        || argument instanceof MessageHeaders
        || argument instanceof MessageHeaderAccessor)) {
      return argument;
    }
    Map<String, Object> changed = new HashMap<>(4);
    for (String name : SWAPPED_HEADERS) {
      Object value = carried(argument, name);
      if (value != null && swaps.containsKey(value)) {
        changed.put(name, swaps.get(value));
      }
    }
    if (changed.isEmpty()) {
      return argument;
    }
    if (argument instanceof Message<?> message) {
      return MessageBuilder.createMessage(
          message.getPayload(), CopiedHeaders.of(message.getHeaders(), changed));
    }
    if (argument instanceof MessageHeaders headers) {
      return CopiedHeaders.of(headers, changed);
    }
    if (argument instanceof MessageHeaderAccessor accessor && accessor.isMutable()) {
      // A copy spring-messaging made for this call alone.
      changed.forEach(accessor::setHeader);
    }
    return argument;
  }

  private static final List<String> SWAPPED_HEADERS =
      List.of(KafkaHeaders.ACKNOWLEDGMENT, KafkaHeaders.CONSUMER);

  /** The header {@code name} of the first message, headers or accessor among the arguments. */
  private static @Nullable Object carriedAmong(@Nullable Object[] arguments, String name) {
    for (Object argument : arguments) {
      Object first = argument instanceof List<?> list && !list.isEmpty() ? list.get(0) : argument;
      Object value = carried(first, name);
      if (value != null) {
        return value;
      }
    }
    return null;
  }

  /** The header {@code name} of a message, headers or accessor argument; null for the rest. */
  private static @Nullable Object carried(@Nullable Object argument, String name) {
    if (argument instanceof Message<?> message) {
      return message.getHeaders().get(name);
    }
    if (argument instanceof MessageHeaders headers) {
      return headers.get(name);
    }
    if (argument instanceof MessageHeaderAccessor accessor) {
      return accessor.getHeader(name);
    }
    return null;
  }

  /**
   * A copy of a message's headers, with some changed, every other header as it was: read as the raw
   * map, never by typed getters. A Kafka record's headers are copied into the message as they came,
   * so a producer's {@code id} or {@code timestamp} header is a {@code byte[]} there, which {@code
   * getId()} and {@code getTimestamp()} refuse (a claim given back, and the record retried, then
   * skipped, never applied), and a constructor given them as a map drops or replaces them.
   */
  private static final class CopiedHeaders extends MessageHeaders {
    private static final long serialVersionUID = 1L;

    /**
     * Spring-kafka's own headers class, made as its converters make it (without a generated id or
     * timestamp): a listener may take {@code @Headers KafkaMessageHeaders} or cast its headers to
     * reach {@code getRawHeaders()}. Null if this spring-kafka does not make it so.
     */
    private static final @Nullable Constructor<KafkaMessageHeaders> KAFKA_HEADERS = kafkaHeaders();

    private CopiedHeaders() {
      super(null, ID_VALUE_NONE, -1L);
    }

    static MessageHeaders of(MessageHeaders headers, Map<String, Object> changed) {
      KafkaMessageHeaders kafkaHeaders =
          headers instanceof KafkaMessageHeaders ? newKafkaHeaders() : null;
      Map<String, Object> raw;
      MessageHeaders copy;
      if (kafkaHeaders != null) {
        raw = kafkaHeaders.getRawHeaders();
        copy = kafkaHeaders;
      } else {
        CopiedHeaders copied = new CopiedHeaders();
        raw = copied.getRawHeaders();
        copy = copied;
      }
      raw.putAll(headers);
      raw.putAll(changed);
      return copy;
    }

    /**
     * Null where the constructor cannot be called: the copy is then a plain {@code MessageHeaders},
     * never a failed record. A native image without its reflection metadata refuses with a {@code
     * LinkageError}, which thrown from here stopped the container at each start.
     */
    private static @Nullable KafkaMessageHeaders newKafkaHeaders() {
      Constructor<KafkaMessageHeaders> constructor = KAFKA_HEADERS;
      if (constructor == null) {
        return null;
      }
      try {
        return constructor.newInstance(false, false);
      } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
        return null;
      }
    }

    private static @Nullable Constructor<KafkaMessageHeaders> kafkaHeaders() {
      try {
        Constructor<KafkaMessageHeaders> constructor =
            KafkaMessageHeaders.class.getDeclaredConstructor(boolean.class, boolean.class);
        constructor.setAccessible(true);
        return constructor;
      } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
        return null;
      }
    }
  }

  /** What the method returns for a duplicate, in place of invoking it. */
  @Nullable Object duplicateResult() {
    return switch (returns) {
      case FUTURE -> CompletableFuture.completedFuture(null);
      case MONO -> MonoOutcomes.empty();
      case VALUE ->
          returnType.isPrimitive() && returnType != void.class
              ? java.lang.reflect.Array.get(java.lang.reflect.Array.newInstance(returnType, 1), 0)
              : null;
    };
  }

  private static boolean isBatch(Method method, @Nullable BeanFactory beanFactory) {
    KafkaListener listener =
        AnnotatedElementUtils.findMergedAnnotation(method, KafkaListener.class);
    if (listener != null) {
      String batch =
          beanFactory instanceof ConfigurableBeanFactory configurable
              ? ListenerAttributes.resolve(configurable, listener.batch())
              : listener.batch();
      if ("true".equalsIgnoreCase(batch.trim())) {
        return true;
      }
    }
    for (Type type : method.getGenericParameterTypes()) {
      if (type instanceof Class<?> raw && ConsumerRecords.class.isAssignableFrom(raw)) {
        return true;
      }
      if (type instanceof ParameterizedType parameterized
          && parameterized.getRawType() instanceof Class<?> raw) {
        if (ConsumerRecords.class.isAssignableFrom(raw)) {
          return true;
        }
        Class<?> elementClass = rawClass(parameterized.getActualTypeArguments()[0]);
        if (Collection.class.isAssignableFrom(raw)
            && (ConsumerRecord.class.isAssignableFrom(elementClass)
                || Message.class.isAssignableFrom(elementClass))) {
          return true;
        }
      }
    }
    return false;
  }

  /** The batch form of a parameter type, or null if it is not one consumer-dedup can filter. */
  private static @Nullable BatchShape batchShapeOf(Type type) {
    Class<?> raw = rawClass(type);
    if (ConsumerRecords.class.isAssignableFrom(raw)) {
      return BatchShape.CONSUMER_RECORDS;
    }
    if (raw != List.class || !(type instanceof ParameterizedType parameterized)) {
      return null;
    }
    Class<?> elementClass = rawClass(parameterized.getActualTypeArguments()[0]);
    if (ConsumerRecord.class.isAssignableFrom(elementClass)) {
      return BatchShape.RECORDS;
    }
    if (Message.class.isAssignableFrom(elementClass)) {
      return BatchShape.MESSAGES;
    }
    return null;
  }

  /** The class of a type as declared: a parameterized type's raw class; Object for the rest. */
  private static Class<?> rawClass(Type type) {
    return type instanceof ParameterizedType p && p.getRawType() instanceof Class<?> c
        ? c
        : type instanceof Class<?> c ? c : Object.class;
  }

  /** Parameters resolved from something else than the payload, as spring-messaging does. */
  private static boolean claimedByAnotherResolver(MethodParameter parameter) {
    Class<?> type = parameter.getParameterType();
    return parameter.hasParameterAnnotation(
            org.springframework.messaging.handler.annotation.Header.class)
        || parameter.hasParameterAnnotation(Headers.class)
        || Consumer.class.isAssignableFrom(type)
        || ConsumerRecordMetadata.class.isAssignableFrom(type)
        || MessageHeaders.class.isAssignableFrom(type)
        || MessageHeaderAccessor.class.isAssignableFrom(type)
        || type.getName().equals(KOTLIN_CONTINUATION)
        || type.getName().equals("org.springframework.kafka.support.ShareAcknowledgment");
  }

  private static Returns returnsOf(Class<?> type) {
    if (CompletionStage.class.isAssignableFrom(type)) {
      return Returns.FUTURE;
    }
    if (REACTOR_PRESENT && MonoOutcomes.isMono(type)) {
      return Returns.MONO;
    }
    return Returns.VALUE;
  }
}
