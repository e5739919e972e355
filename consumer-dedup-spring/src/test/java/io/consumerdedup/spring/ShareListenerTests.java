package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.header;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.kafka.DeadLetterHandler;
import io.consumerdedup.kafka.KafkaDeadLetterPublisher;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BiConsumer;
import java.util.function.IntPredicate;
import java.util.function.Supplier;
import java.util.function.UnaryOperator;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.RecordDeserializationException;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.DefaultShareConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.test.context.DynamicPropertyRegistry;

/**
 * What the tests of {@code @Idempotent} share listeners (the {@code ShareListener*Test} classes of
 * both packages) build their applications with: share container factories over the in-JVM broker,
 * some with consumers whose polls the test watches or stalls, and, for those that need no {@code
 * effects} table, the application's schema and topics; and the poison records two of them send and
 * expect dead-lettered, whether the consumer's poll or an {@code ErrorHandlingDeserializer} meets
 * them.
 */
public final class ShareListenerTests {
  private ShareListenerTests() {}

  /**
   * The consumer configuration of a share container over the in-JVM broker, reading keys and values
   * with these deserializers; a new map, which the caller may add to.
   */
  @SuppressWarnings("rawtypes") // ErrorHandlingDeserializer is a raw Deserializer
  public static Map<String, Object> consumerConfig(
      Class<? extends Deserializer> keys, Class<? extends Deserializer> values) {
    Map<String, Object> config = new HashMap<>();
    config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, TestKafka.bootstrapServers());
    config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, keys);
    config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, values);
    return config;
  }

  /** A share container factory whose consumers have this configuration. */
  public static ShareKafkaListenerContainerFactory<String, String> shareFactory(
      Map<String, Object> consumerConfig) {
    return new ShareKafkaListenerContainerFactory<>(
        new DefaultShareConsumerFactory<>(consumerConfig));
  }

  /**
   * A share container factory whose consumers have this configuration, each handed to the container
   * through {@code wrapper}: how a test watches, or stalls, what its consumer's polls return.
   */
  public static ShareKafkaListenerContainerFactory<String, String> shareFactory(
      Map<String, Object> consumerConfig, UnaryOperator<ShareConsumer<String, String>> wrapper) {
    return new ShareKafkaListenerContainerFactory<>(
        new DefaultShareConsumerFactory<String, String>(consumerConfig) {
          @Override
          protected ShareConsumer<String, String> createRawConsumer(
              String groupId, String clientId) {
            return wrapper.apply(super.createRawConsumer(groupId, clientId));
          }

          @Override
          protected ShareConsumer<String, String> createRawConsumer(
              String groupId, String clientId, Map<String, Object> overrides) {
            return wrapper.apply(super.createRawConsumer(groupId, clientId, overrides));
          }
        });
  }

  /** What a test does with the records a poll of its consumer returned, before the container. */
  interface PollWatcher {
    void polled(ConsumerRecords<?, ?> records) throws InterruptedException;
  }

  /**
   * {@code consumer}, showing the records each of its polls returns to {@code afterPoll}, and each
   * exception a poll throws to {@code pollThrew} before it is thrown on.
   */
  @SuppressWarnings("unchecked")
  static ShareConsumer<String, String> watchingPolls(
      ShareConsumer<String, String> consumer,
      PollWatcher afterPoll,
      java.util.function.Consumer<Throwable> pollThrew) {
    return (ShareConsumer<String, String>)
        Proxy.newProxyInstance(
            ShareConsumer.class.getClassLoader(),
            new Class<?>[] {ShareConsumer.class},
            (proxy, method, args) -> {
              boolean poll = method.getName().equals("poll");
              Object result;
              try {
                result = method.invoke(consumer, args);
              } catch (InvocationTargetException e) {
                if (poll) {
                  pollThrew.accept(e.getCause());
                }
                throw e.getCause();
              }
              if (poll) {
                afterPoll.polled((ConsumerRecords<?, ?>) result);
              }
              return result;
            });
  }

  /**
   * {@code consumer}, whose poll, the first time it hands back a delivery it handed back before (a
   * renewed one) that {@code delivery} accepts, returns only after {@code stall}, as a stalled
   * container thread would; {@code stalled} tells that it did.
   */
  static ShareConsumer<String, String> stallingOnce(
      ShareConsumer<String, String> consumer,
      IntPredicate delivery,
      AtomicBoolean stalled,
      Duration stall) {
    Set<String> seen = ConcurrentHashMap.newKeySet();
    return watchingPolls(
        consumer,
        records -> {
          boolean renewed = false;
          for (ConsumerRecord<?, ?> record : records) {
            short count = record.deliveryCount().orElse((short) 0);
            renewed |= !seen.add(record.offset() + "/" + count) && delivery.test(count);
          }
          if (renewed && stalled.compareAndSet(false, true)) {
            Thread.sleep(stall.toMillis());
          }
        },
        thrown -> {});
  }

  /**
   * The dead-letter handler of an application whose only records to dead-letter are those its
   * consumer cannot deserialize: {@code undeserializable} takes those; any other fails the test.
   */
  static DeadLetterHandler<String, String> undeserializableOnly(
      BiConsumer<ConsumerRecord<byte[], byte[]>, Exception> undeserializable) {
    return new DeadLetterHandler<>() {
      @Override
      public void deadLetter(ConsumerRecord<String, String> record, Exception reason) {
        throw new AssertionError("no dead letter expected for " + record, reason);
      }

      @Override
      public void deadLetterUndeserializable(
          ConsumerRecord<byte[], byte[]> record, Exception reason) {
        undeserializable.accept(record, reason);
      }
    };
  }

  /**
   * A share container factory whose consumers cannot deserialize {@link RejectingDeserializer}'s
   * poison values, counting in {@code deliveries} each poll that throws for one: a delivery of it.
   */
  static ShareKafkaListenerContainerFactory<String, String> countingRejectedDeliveries(
      AtomicInteger deliveries) {
    return shareFactory(
        consumerConfig(StringDeserializer.class, RejectingDeserializer.class),
        consumer ->
            watchingPolls(
                consumer,
                records -> {},
                thrown -> {
                  if (thrown instanceof RecordDeserializationException) {
                    deliveries.incrementAndGet();
                  }
                }));
  }

  /**
   * The dead-letter handler of records the consumer cannot deserialize, whose first {@code
   * slowFailures} tries fail after {@code takes} (read at each try), as a send to a dead-letter
   * topic timing out would; the next one writes the record to {@code deadLetters}. {@code tries}
   * counts them all.
   */
  static DeadLetterHandler<String, String> slowlyFailingDeadLetters(
      AtomicInteger tries,
      int slowFailures,
      Supplier<Duration> takes,
      List<ConsumerRecord<byte[], byte[]>> deadLetters) {
    return undeserializableOnly(
        (record, reason) -> {
          if (tries.incrementAndGet() <= slowFailures) {
            try {
              Thread.sleep(takes.get().toMillis());
            } catch (InterruptedException e) {
              Thread.currentThread().interrupt();
            }
            throw new IllegalStateException("injected: dead-letter send timed out");
          }
          deadLetters.add(record);
        });
  }

  /** A share container factory of String records over the in-JVM broker, 10 records a poll. */
  public static ShareKafkaListenerContainerFactory<String, String> stringShareFactory() {
    Map<String, Object> config = consumerConfig(StringDeserializer.class, StringDeserializer.class);
    config.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 10);
    return shareFactory(config);
  }

  /** A share container factory with {@link TestShareGroups#consumerConfig} of {@code group}. */
  public static ShareKafkaListenerContainerFactory<String, String> groupShareFactory(String group) {
    return shareFactory(TestShareGroups.consumerConfig(group));
  }

  /**
   * Creates a schema and the {@code topics} (one partition each) and points the application at
   * them, with a pool of {@code poolSize} connections and no clean-up; for applications that write
   * no {@code effects} (else {@link SpringTestEnvironment#prepare}).
   */
  public static String prepare(
      DynamicPropertyRegistry registry, String schemaPrefix, int poolSize, String... topics) {
    TestKafka.createTopics(1, topics);
    String schema = TestDatabase.newSchema(schemaPrefix);
    registry.add("spring.kafka.bootstrap-servers", TestKafka::bootstrapServers);
    registry.add("spring.datasource.url", () -> TestDatabase.url(schema));
    registry.add("spring.datasource.hikari.maximum-pool-size", () -> String.valueOf(poolSize));
    registry.add("consumer-dedup.cleanup.enabled", () -> "false");
    return schema;
  }

  /**
   * Sends, in order, order O-1, order P-2 with a value {@link RejectingDeserializer} rejects, order
   * P-3 with a key it rejects, and order O-4: the records of the share listener tests of poison
   * records, however their consumers deserialize.
   */
  static void sendOrdersAroundPoisonKeyAndValue(
      KafkaTemplate<String, String> template, String topic) throws Exception {
    SpringTestEnvironment.send(template, topic, "charge 1.00", "order-no", "O-1");
    ProducerRecord<String, String> badValue =
        new ProducerRecord<>(topic, "K-2", RejectingDeserializer.POISON + " charge 2.00");
    badValue.headers().add("order-no", "P-2".getBytes(StandardCharsets.UTF_8));
    template.send(badValue).get();
    ProducerRecord<String, String> badKey =
        new ProducerRecord<>(topic, RejectingDeserializer.POISON + "K-3", "charge 3.00");
    badKey.headers().add("order-no", "P-3".getBytes(StandardCharsets.UTF_8));
    template.send(badKey).get();
    SpringTestEnvironment.send(template, topic, "charge 4.00", "order-no", "O-4");
  }

  /**
   * Asserts that the two poison records of {@link #sendOrdersAroundPoisonKeyAndValue} are in {@code
   * <topic>-dlt} (read for at most {@code wait}), each with the bytes it was sent with and the
   * deserializer's error.
   */
  static void assertPoisonKeyAndValueDeadLettered(String topic, Duration wait) {
    List<ConsumerRecord<String, String>> deadLetters =
        SpringTestEnvironment.readTopic(topic + "-dlt", 2, wait);
    assertThat(deadLetters).as("dead letters").hasSize(2);
    deadLetters.sort(Comparator.comparing(d -> header(d, "order-no")));
    ConsumerRecord<String, String> value = deadLetters.get(0);
    assertThat(header(value, "order-no")).isEqualTo("P-2");
    assertThat(value.key()).isEqualTo("K-2");
    assertThat(value.value())
        .as("the bytes sent")
        .isEqualTo(RejectingDeserializer.POISON + " charge 2.00");
    assertThat(header(value, KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
        .contains("poisoned value");
    assertThat(header(value, KafkaDeadLetterPublisher.UNDESERIALIZABLE_HEADER)).isEqualTo("value");
    ConsumerRecord<String, String> key = deadLetters.get(1);
    assertThat(header(key, "order-no")).isEqualTo("P-3");
    assertThat(key.key()).as("the bytes sent").isEqualTo(RejectingDeserializer.POISON + "K-3");
    assertThat(key.value()).isEqualTo("charge 3.00");
    assertThat(header(key, KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER))
        .contains("poisoned key");
    assertThat(header(key, KafkaDeadLetterPublisher.UNDESERIALIZABLE_HEADER)).isEqualTo("key");
  }

  /**
   * Sends {@code charge <orderNo>} to {@code topic}, its {@code order-no} header {@code orderNo},
   * through a producer of its own: for tests without a {@code KafkaTemplate}.
   */
  public static void sendOrder(String topic, String orderNo) throws Exception {
    try (KafkaProducer<String, String> producer = TestKafka.producer()) {
      ProducerRecord<String, String> record = new ProducerRecord<>(topic, "charge " + orderNo);
      record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
      producer.send(record).get();
    }
  }

  /** The record's {@code order-no} header. */
  public static String orderNo(ConsumerRecord<?, ?> record) {
    return new String(record.headers().lastHeader("order-no").value(), StandardCharsets.UTF_8);
  }

  /** Counts in {@code applied} one handler call that returned for the record's order number. */
  public static void apply(Map<String, AtomicInteger> applied, ConsumerRecord<?, ?> record) {
    applied.computeIfAbsent(orderNo(record), k -> new AtomicInteger()).incrementAndGet();
  }

  /** How many handler calls for {@code orderNo} returned, as {@link #apply} counted them. */
  public static int appliedCount(Map<String, AtomicInteger> applied, String orderNo) {
    AtomicInteger count = applied.get(orderNo);
    return count == null ? 0 : count.get();
  }

  /**
   * Awaits, for at most {@code wait}, each of {@code orderNos} applied once ({@link #apply}) and no
   * record of {@code topic} (its group of the same name) left unaccepted. Awaits what the user
   * sees, not a thread's end: Awaitility fails an await on any uncaught throwable, and one that
   * cannot be printed left the test unreported.
   */
  public static void awaitAppliedOnceAndAccepted(
      Map<String, AtomicInteger> applied, Duration wait, String topic, String... orderNos) {
    await()
        .atMost(wait)
        .dontCatchUncaughtExceptions()
        .untilAsserted(
            () -> {
              Map<String, Integer> counts = new TreeMap<>();
              for (String orderNo : orderNos) {
                counts.put(orderNo, appliedCount(applied, orderNo));
              }
              assertThat(counts).as("times applied").allSatisfy((k, n) -> assertThat(n).isOne());
              assertThat(TestShareGroups.lag(topic, topic)).as("records not accepted").isZero();
            });
  }
}
