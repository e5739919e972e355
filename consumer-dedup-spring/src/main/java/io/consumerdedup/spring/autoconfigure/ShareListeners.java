package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.kafka.DeadLetterHandler;
import io.consumerdedup.kafka.KafkaDeadLetterPublisher;
import io.consumerdedup.kafka.internal.UndeserializableRecords;
import io.consumerdedup.spring.Idempotent;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.aop.support.AopUtils;
import org.springframework.beans.factory.ListableBeanFactory;
import org.springframework.core.annotation.AnnotatedElementUtils;
import org.springframework.kafka.core.ProducerFactory;
import org.springframework.kafka.listener.AcknowledgingShareConsumerAwareMessageListener;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.listener.ShareKafkaMessageListenerContainer;
import org.springframework.kafka.listener.adapter.HandlerAdapter;
import org.springframework.kafka.listener.adapter.MessagingMessageListenerAdapter;
import org.springframework.kafka.support.ShareAcknowledgment;
import org.springframework.util.ReflectionUtils;

/**
 * Protects the {@code @Idempotent} listeners of spring-kafka 4.1 share containers: finds them,
 * refuses the shapes that cannot be protected, and wraps each in a {@link DedupShareListener}. Used
 * only on spring-kafka 4.1 and later ({@link ShareContainers#RENEWAL_AVAILABLE}): it names types
 * that spring-kafka 4.0 does not have.
 */
final class ShareListeners {
  private static final Logger log = LoggerFactory.getLogger(ShareListeners.class);

  /** spring-kafka keeps the listener method in private fields; there is no getter in 4.1. */
  private static final @Nullable Field HANDLER =
      ReflectionUtils.findField(MessagingMessageListenerAdapter.class, "handlerMethod");

  private static final @Nullable Field INVOKER =
      ReflectionUtils.findField(HandlerAdapter.class, "invokerHandlerMethod");

  private ShareListeners() {}

  /** The {@code @Idempotent} method a share container calls, null if it calls none. */
  static @Nullable Method idempotentMethod(MessageListenerContainer container) {
    if (!(container instanceof ShareKafkaMessageListenerContainer<?, ?> share)
        || !(share.getContainerProperties().getMessageListener()
            instanceof MessagingMessageListenerAdapter<?, ?> adapter)
        || HANDLER == null
        || INVOKER == null) {
      return null;
    }
    ReflectionUtils.makeAccessible(HANDLER);
    ReflectionUtils.makeAccessible(INVOKER);
    if (!(ReflectionUtils.getField(HANDLER, adapter) instanceof HandlerAdapter handler)
        || !(ReflectionUtils.getField(INVOKER, handler)
            instanceof
            org.springframework.messaging.handler.invocation.InvocableHandlerMethod invocable)) {
      return null; // a class-level @KafkaListener: refused, as its method is not found
    }
    Method method =
        AopUtils.getMostSpecificMethod(
            invocable.getMethod(), AopUtils.getTargetClass(invocable.getBean()));
    return AnnotatedElementUtils.hasAnnotation(method, Idempotent.class) ? method : null;
  }

  /** How {@link ShareContainers} names a listener: the declaring class and the method. */
  static String nameOf(Method method) {
    return method.getDeclaringClass().getName() + "#" + method.getName();
  }

  /** A share listener consumer-dedup wrapped; closed, its container is put back as it was made. */
  interface Wrapped extends AutoCloseable {
    /** The application's stop began: see {@link DedupShareListener#stopping}. */
    void stopping();

    @Override
    void close();
  }

  /**
   * Puts each share container that calls an {@code @Idempotent} method in {@code
   * ShareAckMode.MANUAL} and wraps its listener; returns what to close when the containers stopped.
   *
   * @throws UnsupportedShareListenerException a shape that cannot be protected; the listeners
   *     wrapped before it are undone
   */
  static List<Wrapped> configure(
      Collection<MessageListenerContainer> containers,
      ListableBeanFactory beanFactory,
      ConsumerDedupProperties properties) {
    List<Wrapped> wrapped = new ArrayList<>();
    try {
      for (MessageListenerContainer container : containers) {
        Wrapped undo = configure(container, beanFactory, properties);
        if (undo != null) {
          wrapped.add(undo);
        }
      }
    } catch (RuntimeException | Error e) {
      // Nobody stops a listener whose start failed: the listeners wrapped before the refusal
      // are undone here, or their dead-letter producers ran on, a thread each, after the failed
      // start (and after every retry of it).
      closeAll(wrapped, e);
      throw e;
    }
    return wrapped;
  }

  /** Undoes each of {@code wrapped}, whatever the others throw (added to {@code failure}). */
  static void closeAll(List<Wrapped> wrapped, Throwable failure) {
    for (Wrapped undo : wrapped) {
      try {
        undo.close();
      } catch (Exception | Error e) {
        failure.addSuppressed(e);
      }
    }
  }

  /**
   * Wraps the listener of {@code container} if it calls an {@code @Idempotent} method; what undoes
   * that, or null if it does not.
   */
  @SuppressWarnings({"unchecked", "rawtypes"})
  private static @Nullable Wrapped configure(
      MessageListenerContainer container,
      ListableBeanFactory beanFactory,
      ConsumerDedupProperties properties) {
    Method method = idempotentMethod(container);
    if (method == null || container.isRunning()) {
      return null;
    }
    ShareKafkaMessageListenerContainer<?, ?> share =
        (ShareKafkaMessageListenerContainer<?, ?>) container;
    ContainerProperties containerProperties = share.getContainerProperties();
    if (containerProperties.getMessageListener() instanceof DedupShareListener<?, ?>) {
      return null;
    }
    refuseShape(method, share, containerProperties);
    String groupId = String.valueOf(share.getGroupId());
    List<Producer<?, ?>> created = new ArrayList<>();
    DeadLetterHandler deadLetters;
    try {
      deadLetters =
          ShareDeserializationFailures.withRawBytes(
              deadLetters(beanFactory, method, groupId, created));
    } catch (RuntimeException | Error e) {
      // The typed producer made before the raw one failed: closed, not left running.
      closeDeadLetterProducers(created, method);
      throw e;
    }
    Duration timeout = containerProperties.getShareAcknowledgmentTimeout();
    ContainerProperties.ShareAckMode ackMode = containerProperties.getShareAckMode();
    Object original = Objects.requireNonNull(containerProperties.getMessageListener());
    containerProperties.setShareAckMode(ContainerProperties.ShareAckMode.MANUAL);
    // Every renewed record comes back to the container as a new delivery of the same offset,
    // which spring-kafka 4.1 keeps as pending for good: its warning about records not
    // acknowledged in time would name each of them, although consumer-dedup acknowledges them.
    containerProperties.setShareAcknowledgmentTimeout(Duration.ofDays(3650));
    DedupShareListener<?, ?> listener =
        new DedupShareListener<>(
            (AcknowledgingShareConsumerAwareMessageListener) original,
            share.getListenerId(),
            groupId,
            deadLetters,
            new DedupShareListener.Settings(
                properties.getMaxAttempts(),
                properties.getShare().getDeliveryCountLimit(),
                properties.getShare().getRetryBackoff(),
                properties.getHold().getInitialBackoff(),
                properties.getHold().getMaxBackoff(),
                properties.getShare().getCloseTimeout()));
    share.setupMessageListener(listener);
    Runnable ownConsumers =
        WrappedShareConsumers.apply(
            share, listener::finish, properties.getShare().getCloseTimeout());
    log.info(
        "Share-group listener {} (group {}): acknowledged by consumer-dedup (ShareAckMode.MANUAL,"
            + " spring-kafka's acknowledgment timeout warning of {} turned off), locks renewed"
            + " while handled or waiting for another consumer's claim",
        nameOf(method),
        groupId,
        timeout);
    // Undone when the application stops, so that a start after it (a context stopped and
    // started again) finds the container as it was made and protects it afresh, with a new
    // worker and dead-letter producer, instead of a closed listener that ignores every record.
    return new Wrapped() {
      @Override
      public void stopping() {
        listener.stopping();
      }

      @Override
      public void close() {
        try {
          listener.close();
        } finally {
          // Whatever the closes throw, the container is put back. A producer's close on the
          // interrupted thread of a stop threw InterruptException, which left the container
          // with the closed listener: the next start found no @Idempotent method in it and
          // failed, naming a listener shape that was not the cause.
          closeDeadLetterProducers(created, method);
          if (!share.isRunning()) {
            if (ownConsumers != null) {
              ownConsumers.run();
            }
            share.setupMessageListener(original);
            containerProperties.setShareAckMode(ackMode);
            containerProperties.setShareAcknowledgmentTimeout(timeout);
          }
        }
      }
    };
  }

  /**
   * Closes the dead-letter producers the listener made, each whatever the others throw (logged),
   * with the stopping thread's interrupt kept aside and set again afterwards: it asks for the stop
   * under way, and a close it cut short threw, leaving the producer's thread running.
   */
  private static void closeDeadLetterProducers(List<Producer<?, ?>> producers, Method method) {
    boolean interrupted = Thread.interrupted();
    try {
      for (Producer<?, ?> producer : producers) {
        try {
          producer.close();
        } catch (RuntimeException e) {
          interrupted |= Thread.interrupted();
          log.warn(
              "Share-group listener {}: could not close a dead-letter producer: {}",
              nameOf(method),
              e.toString());
        }
      }
    } finally {
      if (interrupted) {
        Thread.currentThread().interrupt();
      }
    }
  }

  private static void refuseShape(
      Method method,
      ShareKafkaMessageListenerContainer<?, ?> container,
      ContainerProperties properties) {
    String where =
        "@Idempotent listener "
            + nameOf(method)
            + " runs in share-group container "
            + container.getListenerId();
    if (properties.getShareAckMode() == ContainerProperties.ShareAckMode.IMPLICIT) {
      throw new UnsupportedShareListenerException(
          where
              + " in ShareAckMode.IMPLICIT: the broker accepts every record it delivers, whatever"
              + " the listener did, so a copy that must wait or a failure to retry is lost",
          "Remove setShareAckMode(IMPLICIT) from the container factory: consumer-dedup acknowledges"
              + " each record itself");
    }
    boolean takesAcknowledgment =
        Arrays.stream(method.getParameterTypes())
            .anyMatch(
                type ->
                    ShareAcknowledgment.class.isAssignableFrom(type)
                        || ShareConsumer.class.isAssignableFrom(type));
    if (takesAcknowledgment) {
      throw new UnsupportedShareListenerException(
          where
              + " and takes a ShareAcknowledgment or ShareConsumer argument: consumer-dedup"
              + " acknowledges each record by its outcome (ACCEPT, RELEASE, REJECT, renewing"
              + " its lock meanwhile) and calls the listener off the consumer's thread",
          "Remove the argument: return normally to have the record accepted, throw to have it"
              + " retried and then dead-lettered");
    }
  }

  /**
   * The application's {@link DeadLetterHandler} bean if it has one, else a {@link
   * KafkaDeadLetterPublisher} over a producer of its {@code ProducerFactory}, and, for the records
   * the deserializer rejected, a producer of bytes with the same configuration; adds the producers
   * it makes to {@code created}.
   */
  @SuppressWarnings({"unchecked", "rawtypes"})
  private static DeadLetterHandler<?, ?> deadLetters(
      ListableBeanFactory beanFactory,
      Method method,
      String groupId,
      List<Producer<?, ?>> created) {
    DeadLetterHandler<?, ?> handler =
        beanFactory.getBeanProvider(DeadLetterHandler.class).getIfUnique();
    if (handler != null) {
      String warning =
          UndeserializableRecords.cannotBeDeadLetteredBy(
              handler,
              "a record of share listener "
                  + nameOf(method)
                  + " that the deserializer rejects is held and tried again, an ERROR each time,"
                  + " never dead-lettered (one the consumer's poll throws for is released after"
                  + " the tries that fit in its lock, and the broker archives it once its deliveries"
                  + " are spent)");
      if (warning != null) {
        log.warn(warning);
      }
      return handler;
    }
    ProducerFactory<?, ?> producers =
        beanFactory.getBeanProvider(ProducerFactory.class).getIfUnique();
    if (producers == null) {
      throw new UnsupportedShareListenerException(
          "@Idempotent listener "
              + nameOf(method)
              + " runs in a share-group container, where a record given up is rejected only once"
              + " its dead letter is written, and the application has no DeadLetterHandler bean"
              + " and no single Kafka ProducerFactory to write one with",
          "Define a ProducerFactory (Spring Boot makes one from spring.kafka.producer.*) or a"
              + " DeadLetterHandler bean, such as KafkaDeadLetterPublisher");
    }
    // A transactional factory (spring.kafka.producer.transaction-id-prefix, for the application's
    // consumer-group listeners) makes producers that send only inside a transaction, which no dead
    // letter is written in: every dead letter failed, and the record was kept acquired and tried
    // again for good, its consumer fetching nothing meanwhile.
    Producer producer;
    if (producers.transactionCapable()) {
      try {
        producer = producers.createNonTransactionalProducer();
      } catch (UnsupportedOperationException e) {
        throw new UnsupportedShareListenerException(
            "@Idempotent listener "
                + nameOf(method)
                + " runs in a share-group container, whose dead letters are written outside any"
                + " transaction, and the application's ProducerFactory is transactional and makes"
                + " no non-transactional producer",
            "Define a DeadLetterHandler bean, such as a KafkaDeadLetterPublisher over a producer"
                + " that is not transactional");
      }
    } else {
      producer = producers.createProducer();
    }
    created.add(producer);
    KafkaDeadLetterPublisher.Builder publisher =
        KafkaDeadLetterPublisher.builder(producer).groupId(groupId);
    Producer<byte[], byte[]> raw = rawProducer(producers, method);
    if (raw != null) {
      created.add(raw);
      publisher.rawProducer(raw);
    }
    return publisher.build();
  }

  /**
   * A producer of bytes configured as {@code producers}' producers, for the dead letters of records
   * whose key or value the consumer's ErrorHandlingDeserializer could not deserialize: their bytes
   * are all there is, which the typed producer's serializers cannot write. Not transactional (the
   * dead letters of the typed producer are not either). Null, and said, if the factory does not
   * tell its configuration.
   */
  private static @Nullable Producer<byte[], byte[]> rawProducer(
      ProducerFactory<?, ?> producers, Method method) {
    Map<String, Object> config;
    try {
      config = new HashMap<>(producers.getConfigurationProperties());
    } catch (UnsupportedOperationException e) {
      log.warn(
          "Share-group listener {}: its ProducerFactory does not tell its configuration, so a"
              + " record the deserializer rejects cannot be dead-lettered with its bytes and is kept"
              + " acquired until it can; define a DeadLetterHandler bean (a KafkaDeadLetterPublisher"
              + " built with rawProducer(...))",
          nameOf(method));
      return null;
    }
    config.remove(ProducerConfig.TRANSACTIONAL_ID_CONFIG);
    if (config.get(ProducerConfig.CLIENT_ID_CONFIG) instanceof String clientId) {
      config.put(ProducerConfig.CLIENT_ID_CONFIG, clientId + "-dead-letters-raw");
    }
    return new KafkaProducer<>(config, new ByteArraySerializer(), new ByteArraySerializer());
  }
}
