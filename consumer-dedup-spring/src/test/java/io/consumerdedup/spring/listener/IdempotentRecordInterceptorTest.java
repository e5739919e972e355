package io.consumerdedup.spring.listener;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatCode;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.kafka.MissingKeyPolicy;
import io.consumerdedup.spring.internal.GuardedRecordInterceptor;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.UUID;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.core.DefaultKafkaProducerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.AcknowledgingMessageListener;
import org.springframework.kafka.listener.BatchMessageListener;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.GenericMessageListener;
import org.springframework.kafka.listener.KafkaMessageListenerContainer;
import org.springframework.kafka.listener.MessageListener;
import org.springframework.kafka.listener.RecordInterceptor;
import org.springframework.kafka.listener.adapter.AsyncRepliesAware;
import org.springframework.kafka.test.utils.KafkaTestUtils;
import org.springframework.util.backoff.FixedBackOff;

/**
 * A container built by hand, without Spring Boot, made idempotent by a record interceptor; each
 * test has a topic of its own on the shared in-JVM broker.
 */
class IdempotentRecordInterceptorTest {
  private String schema;
  private HikariDataSource dataSource;
  private IdempotentExecutor executor;
  private String topic;

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("spring_interceptor");
    dataSource = TestDatabase.dataSource(schema, 2);
    executor = IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build()).build();
    topic = "hand-built-" + UUID.randomUUID().toString().substring(0, 8);
    TestKafka.createTopics(1, topic);
  }

  @AfterEach
  void tearDown() {
    executor.close();
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  private KafkaMessageListenerContainer<String, String> container(
      MessageListener<String, String> listener) {
    return container((GenericMessageListener<?>) listener);
  }

  private KafkaMessageListenerContainer<String, String> container(
      AcknowledgingMessageListener<String, String> listener) {
    return container((GenericMessageListener<?>) listener);
  }

  private KafkaMessageListenerContainer<String, String> container(
      GenericMessageListener<?> listener) {
    return container(listener, Map.of());
  }

  /** With {@code consumerConfigs} added to the consumers' own. */
  private KafkaMessageListenerContainer<String, String> container(
      GenericMessageListener<?> listener, Map<String, Object> consumerConfigs) {
    ContainerProperties properties = new ContainerProperties(topic);
    properties.setGroupId(topic);
    properties.setMessageListener(listener);
    Map<String, Object> configs = new HashMap<>(consumerConfigs);
    configs.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, TestKafka.bootstrapServers());
    configs.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    KafkaMessageListenerContainer<String, String> container =
        new KafkaMessageListenerContainer<>(
            new DefaultKafkaConsumerFactory<>(
                configs, new StringDeserializer(), new StringDeserializer()),
            properties);
    container.setCommonErrorHandler(new DefaultErrorHandler(new FixedBackOff(0, 5)));
    return container;
  }

  /** Sends the values; those starting with "pay X" carry X in the key header. */
  private void send(List<String> values) throws Exception {
    DefaultKafkaProducerFactory<String, String> producers =
        new DefaultKafkaProducerFactory<>(
            Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, TestKafka.bootstrapServers()),
            new StringSerializer(),
            new StringSerializer());
    try {
      KafkaTemplate<String, String> template = new KafkaTemplate<>(producers);
      for (String value : values) {
        ProducerRecord<String, String> record = new ProducerRecord<>(topic, value);
        if (value.startsWith("pay ")) {
          record
              .headers()
              .add(
                  IdempotentRecordInterceptor.DEFAULT_KEY_HEADER,
                  value.substring(4, 5).getBytes(StandardCharsets.UTF_8));
        }
        template.send(record).get();
      }
    } finally {
      producers.destroy();
    }
  }

  @Test
  void eachKeyIsAppliedOnceAndTheContainersOwnInterceptorStillRuns() throws Exception {
    List<String> applied = new CopyOnWriteArrayList<>();
    List<String> intercepted = new CopyOnWriteArrayList<>();
    KafkaMessageListenerContainer<String, String> container =
        container(record -> applied.add(record.value()));
    RecordInterceptor<String, String> ownInterceptor =
        (record, consumer) -> {
          intercepted.add(record.value());
          return record;
        };
    container.setRecordInterceptor(ownInterceptor);

    IdempotentRecordInterceptor.decorate(container, executor, "payment");
    container.start();
    try {
      send(List.of("pay A", "pay A again", "pay B", "pay A once more", "no key", "pay C"));
      await().atMost(Duration.ofSeconds(30)).until(() -> applied.contains("pay C"));
    } finally {
      container.stop();
    }

    assertThat(applied).containsExactly("pay A", "pay B", "pay C");
    // Six deliveries, no more: the record without a key was not retried (not retryable).
    assertThat(intercepted).hasSize(6);
    assertThat(container.getRecordInterceptor()).isInstanceOf(GuardedRecordInterceptor.class);
    DedupRecord a = executor.store().find(DedupKey.of("payment", "A")).orElseThrow();
    assertThat(a.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(a.source()).get().asString().contains(topic + "-0@0").contains("group " + topic);
  }

  @Test
  void aListenerThatFailsOnceIsRetriedByTheContainerAndAppliedOnce() throws Exception {
    AtomicInteger calls = new AtomicInteger();
    List<String> applied = new CopyOnWriteArrayList<>();
    KafkaMessageListenerContainer<String, String> container =
        container(
            record -> {
              if (calls.incrementAndGet() == 1) {
                throw new IllegalStateException("bank timed out");
              }
              applied.add(record.value());
            });
    IdempotentRecordInterceptor.decorate(container, executor, "payment");
    container.start();
    try {
      send(List.of("pay F", "pay F again", "pay G"));
      await().atMost(Duration.ofSeconds(30)).until(() -> applied.contains("pay G"));
    } finally {
      container.stop();
    }

    // Attempt 1 threw and was retried by the container; the copy at the next offset was skipped.
    assertThat(applied).containsExactly("pay F", "pay G");
    assertThat(calls).hasValue(3);
    DedupRecord f = executor.store().find(DedupKey.of("payment", "F")).orElseThrow();
    assertThat(f.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(f.attempts()).isEqualTo(2);
    assertThat(f.lastError()).as("the failed attempt's error, cleared by SUCCESS").isEmpty();
  }

  @Test
  void aListenerThatAlwaysFailsRunsMaxAttemptsTimesThenItsRecordIsGivenUpUnrun() throws Exception {
    AtomicInteger calls = new AtomicInteger();
    AtomicInteger deliveries = new AtomicInteger();
    List<String> applied = new CopyOnWriteArrayList<>();
    KafkaMessageListenerContainer<String, String> container =
        container(
            record -> {
              if (record.value().equals("pay H")) {
                calls.incrementAndGet();
                throw new IllegalStateException("bank timed out");
              }
              applied.add(record.value());
            });
    container.setRecordInterceptor(
        (record, consumer) -> {
          deliveries.incrementAndGet();
          return record;
        });
    IdempotentRecordInterceptor.decorate(
        container,
        executor,
        "payment",
        IdempotentRecordInterceptor.DEFAULT_KEY_HEADER,
        MissingKeyPolicy.FAIL,
        2);
    container.start();
    try {
      send(List.of("pay H", "pay J"));
      await().atMost(Duration.ofSeconds(30)).until(() -> applied.contains("pay J"));
    } finally {
      container.stop();
    }

    // The error handler would deliver it six times; the third delivery finds its attempts spent.
    assertThat(calls).hasValue(2);
    assertThat(deliveries).hasValue(4);
    DedupRecord h = executor.store().find(DedupKey.of("payment", "H")).orElseThrow();
    assertThat(h.status()).isEqualTo(DedupStatus.FAILED);
    assertThat(h.attempts()).isEqualTo(2);
  }

  @Test
  void aListenerThatThrowsAnErrorLeavesItsKeyFailedNotProcessingWhenTheContainerStops()
      throws Exception {
    KafkaMessageListenerContainer<String, String> container =
        container(
            record -> {
              throw new StackOverflowError("simulated");
            });
    IdempotentRecordInterceptor.decorate(container, executor, "payment");
    container.start();
    try {
      send(List.of("pay E"));
      // spring-kafka stops a container whose listener throws an Error.
      await().atMost(Duration.ofSeconds(30)).until(() -> !container.isRunning());
    } finally {
      container.stop();
    }

    DedupKey key = DedupKey.of("payment", "E");
    await()
        .atMost(Duration.ofSeconds(10))
        .until(() -> executor.store().find(key).orElseThrow().status() == DedupStatus.FAILED);
    assertThat(executor.store().find(key).orElseThrow().lastError())
        .get()
        .asString()
        .contains("never reported the end of the record");
  }

  @Test
  void anInterceptorBeforeOursThatThrowsInSuccessDoesNotLeaveTheClaimOpen() throws Exception {
    List<String> applied = new CopyOnWriteArrayList<>();
    KafkaMessageListenerContainer<String, String> container =
        container(record -> applied.add(record.value()));
    container.setRecordInterceptor(
        new RecordInterceptor<>() {
          @Override
          public ConsumerRecord<String, String> intercept(
              ConsumerRecord<String, String> record, Consumer<String, String> consumer) {
            return record;
          }

          @Override
          public void success(
              ConsumerRecord<String, String> record, Consumer<String, String> consumer) {
            throw new IllegalStateException("the application's interceptor failed");
          }
        });
    IdempotentRecordInterceptor.decorate(container, executor, "payment");
    container.start();
    try {
      send(List.of("pay S", "pay S again"));
      await().atMost(Duration.ofSeconds(30)).until(() -> applied.contains("pay S"));
      DedupKey key = DedupKey.of("payment", "S");
      await()
          .atMost(Duration.ofSeconds(10))
          .until(() -> executor.store().find(key).orElseThrow().status() == DedupStatus.SUCCESS);
    } finally {
      container.stop();
    }
    assertThat(applied).containsExactly("pay S");
  }

  /**
   * The application's interceptor throws an Error from {@code success}, after the listener returned
   * with no transaction: its effects are committed, so the key must be SUCCESS. Before, the Error
   * skipped consumer-dedup's interceptor, and a claim the container never reported on was recorded
   * FAILED as the container stopped, whatever the listener did: the record's redelivery (or any
   * later copy of its key) ran the listener a second time.
   */
  @Test
  void anErrorFromAnInterceptorBeforeOursAfterTheListenerReturnedStillRecordsSuccess()
      throws Exception {
    List<String> applied = new CopyOnWriteArrayList<>();
    KafkaMessageListenerContainer<String, String> container =
        container(record -> applied.add(record.value()));
    container.setRecordInterceptor(new ErrorInFirstSuccess());
    IdempotentRecordInterceptor.decorate(container, executor, "payment");
    DedupKey key = DedupKey.of("payment", "V");
    container.start();
    try {
      send(List.of("pay V"));
      awaitStoppedWithClaimEnded(container, key);
      assertThat(executor.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);

      container.start();
      send(List.of("pay V again"));
      await().atMost(Duration.ofSeconds(30)).until(() -> committed() == 2);
    } finally {
      container.stop();
    }

    assertThat(applied)
        .as("neither the redelivery nor the later copy ran")
        .containsExactly("pay V");
    DedupRecord v = executor.store().find(key).orElseThrow();
    assertThat(v.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(v.attempts()).isEqualTo(1);
  }

  /**
   * The same Error inside the container's database transaction: it rolls the listener's effects
   * back, so the key is FAILED and the redelivery applies the record, once. Before, the Error also
   * skipped the interceptor that holds the consumer's commits back until the record's transaction
   * commits: the commit as the container stopped passed the record, which never came again.
   */
  @Test
  void anErrorFromAnInterceptorBeforeOursInsideTheContainersTransactionLeavesTheKeyToItsRedelivery()
      throws Exception {
    JdbcTemplate jdbc = new JdbcTemplate(dataSource);
    jdbc.execute("CREATE TABLE payments (payment text NOT NULL)");
    AtomicInteger calls = new AtomicInteger();
    KafkaMessageListenerContainer<String, String> container =
        container(
            record -> {
              calls.incrementAndGet();
              jdbc.update("INSERT INTO payments VALUES (?)", record.value());
            });
    container
        .getContainerProperties()
        .setTransactionManager(new DataSourceTransactionManager(dataSource));
    container.setRecordInterceptor(new ErrorInFirstSuccess());
    IdempotentRecordInterceptor.decorate(container, executor, "payment");
    DedupKey key = DedupKey.of("payment", "W");
    container.start();
    try {
      send(List.of("pay W"));
      awaitStoppedWithClaimEnded(container, key);
      assertThat(executor.store().find(key).orElseThrow().status()).isEqualTo(DedupStatus.FAILED);
      assertThat(payments(jdbc)).as("rolled back with the transaction").isZero();
      assertThat(committed()).as("no commit passed the rolled-back record").isLessThan(1);

      container.start();
      await()
          .atMost(Duration.ofSeconds(30))
          .until(
              () ->
                  executor.store().find(key).orElseThrow().status() == DedupStatus.SUCCESS
                      && committed() == 1);
    } finally {
      container.stop();
    }

    assertThat(calls).as("the rolled-back call, then the redelivery").hasValue(2);
    assertThat(payments(jdbc)).as("applied exactly once").isEqualTo(1);
    assertThat(executor.store().find(key).orElseThrow().attempts()).isEqualTo(2);
  }

  private static int payments(JdbcTemplate jdbc) {
    return Objects.requireNonNull(
        jdbc.queryForObject("SELECT count(*) FROM payments", Integer.class));
  }

  /**
   * spring-kafka stops a container whose record interceptor throws an Error; the consumer thread
   * then clears its state, which ends a claim the container never reported on.
   */
  private void awaitStoppedWithClaimEnded(
      KafkaMessageListenerContainer<String, String> container, DedupKey key) {
    await()
        .atMost(Duration.ofSeconds(30))
        .until(
            () ->
                !container.isRunning()
                    && executor
                        .store()
                        .find(key)
                        .filter(row -> row.status() != DedupStatus.PROCESSING)
                        .isPresent());
  }

  /** The application's record interceptor, throwing an Error from its first {@code success}. */
  private static final class ErrorInFirstSuccess implements RecordInterceptor<String, String> {
    private final AtomicBoolean thrown = new AtomicBoolean();

    @Override
    public ConsumerRecord<String, String> intercept(
        ConsumerRecord<String, String> record, Consumer<String, String> consumer) {
      return record;
    }

    @Override
    public void success(ConsumerRecord<String, String> record, Consumer<String, String> consumer) {
      if (thrown.compareAndSet(false, true)) {
        throw new ApplicationInterceptorError();
      }
    }
  }

  /** An Error of the application's, not one the JVM throws. */
  private static final class ApplicationInterceptorError extends Error {
    ApplicationInterceptorError() {
      super("the application's interceptor failed");
    }
  }

  /**
   * The container moved on from a record whose listener returned without a transaction, and the
   * application's {@code DedupListener} throws an Error as the claim is recorded SUCCESS while the
   * consumer thread clears its state. spring-kafka calls that past the catch that stops a container
   * on an Error, so thrown there it ended the consumer thread without closing the consumer (see
   * {@code RecordListenerClearThreadStateErrorTest} for a running container): it is thrown as the
   * thread sets up its next poll instead, once, and only for the same consumer.
   */
  @Test
  void anErrorSettlingAClaimAsTheThreadStateIsClearedIsThrownBeforeTheNextPoll() {
    AssertionError bug = new AssertionError("metrics backend bug");
    try (IdempotentExecutor withBuggyListener =
        IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build())
            .listener(
                new DedupListener() {
                  @Override
                  public void completed(DedupKey key, int attempt, Duration handlerTime) {
                    throw bug;
                  }
                })
            .build()) {
      IdempotentRecordInterceptor<String, String> interceptor =
          new IdempotentRecordInterceptor<>(
              withBuggyListener,
              "payment",
              IdempotentRecordInterceptor.DEFAULT_KEY_HEADER,
              MissingKeyPolicy.FAIL,
              topic);
      MockConsumer<String, String> consumer = new MockConsumer<>("earliest");
      // No afterRecord for either: an Error after the listener returned.
      listenerReturned(interceptor, consumer, 4, "L");
      interceptor.clearThreadState(consumer);

      assertThat(executor.store().find(DedupKey.of("payment", "L")).orElseThrow().status())
          .isEqualTo(DedupStatus.SUCCESS);
      assertThatCode(() -> interceptor.setupThreadState(new MockConsumer<>("earliest")))
          .as("another consumer's poll on this thread (a pooled thread) does not stop for it")
          .doesNotThrowAnyException();

      listenerReturned(interceptor, consumer, 5, "M");
      interceptor.clearThreadState(consumer);
      assertThat(executor.store().find(DedupKey.of("payment", "M")).orElseThrow().status())
          .isEqualTo(DedupStatus.SUCCESS);
      assertThatThrownBy(() -> interceptor.setupThreadState(consumer)).isSameAs(bug);
      assertThatCode(() -> interceptor.setupThreadState(consumer)).doesNotThrowAnyException();
    }
  }

  /** The listener returned for a record keyed {@code key}, with no transaction. */
  private void listenerReturned(
      IdempotentRecordInterceptor<String, String> interceptor,
      MockConsumer<String, String> consumer,
      long offset,
      String key) {
    ConsumerRecord<String, String> record =
        new ConsumerRecord<>(topic, 0, offset, null, "pay " + key);
    record
        .headers()
        .add(IdempotentRecordInterceptor.DEFAULT_KEY_HEADER, key.getBytes(StandardCharsets.UTF_8));
    assertThat(interceptor.intercept(record, consumer)).isSameAs(record);
    interceptor.success(record, consumer);
  }

  @Test
  void inManualAckModeANackIsRetriedAndADuplicateIsAcknowledged() throws Exception {
    AtomicInteger calls = new AtomicInteger();
    List<String> applied = new CopyOnWriteArrayList<>();
    KafkaMessageListenerContainer<String, String> container =
        container(
            (AcknowledgingMessageListener<String, String>)
                (record, ack) -> {
                  if (calls.incrementAndGet() == 1) {
                    ack.nack(Duration.ofMillis(100));
                    return;
                  }
                  applied.add(record.value());
                  ack.acknowledge();
                });
    container.getContainerProperties().setAckMode(ContainerProperties.AckMode.MANUAL);
    IdempotentRecordInterceptor.decorate(container, executor, "payment");
    container.start();
    try {
      send(List.of("pay N", "pay N again"));
      await().atMost(Duration.ofSeconds(30)).until(() -> committed() == 2);
    } finally {
      container.stop();
    }

    assertThat(applied).containsExactly("pay N");
    DedupRecord n = executor.store().find(DedupKey.of("payment", "N")).orElseThrow();
    assertThat(n.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(n.attempts()).as("the nacked attempt, then the redelivery").isEqualTo(2);
  }

  /**
   * A listener that acknowledges its record, then throws: spring-kafka committed the acknowledged
   * offset before its error handler sought the record back, so a stop before the retry succeeded
   * lost the record, its key FAILED and never applied.
   */
  @Test
  void inManualAckModeARecordAcknowledgedBeforeItsListenerThrewIsStillDeliveredAfterARestart()
      throws Exception {
    AtomicInteger calls = new AtomicInteger();
    AtomicBoolean failing = new AtomicBoolean(true);
    CountDownLatch retryRunning = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    List<String> applied = new CopyOnWriteArrayList<>();
    KafkaMessageListenerContainer<String, String> container =
        container(
            (AcknowledgingMessageListener<String, String>)
                (record, ack) -> {
                  int call = calls.incrementAndGet();
                  Objects.requireNonNull(ack).acknowledge();
                  if (failing.get()) {
                    if (call == 2) {
                      retryRunning.countDown();
                      try {
                        release.await(30, TimeUnit.SECONDS);
                      } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                      }
                    }
                    throw new IllegalStateException("downstream refused " + record.value());
                  }
                  applied.add(record.value());
                });
    container.getContainerProperties().setAckMode(ContainerProperties.AckMode.MANUAL);
    IdempotentRecordInterceptor.decorate(container, executor, "payment");
    container.start();
    try {
      send(List.of("pay M"));
      // The retry of the first call, which threw, is running: the container stops meanwhile.
      assertThat(retryRunning.await(30, TimeUnit.SECONDS)).isTrue();
      Thread stopping = new Thread(container::stop); // returns once the consumer has ended
      stopping.start();
      await().atMost(Duration.ofSeconds(30)).until(() -> !container.isRunning());
      release.countDown();
      stopping.join(Duration.ofSeconds(30).toMillis());
      assertThat(stopping.isAlive()).as("the stop, still waiting for the consumer").isFalse();
      assertThat(executor.store().find(DedupKey.of("payment", "M")).orElseThrow().status())
          .isEqualTo(DedupStatus.FAILED);
      assertThat(committed())
          .as("the group's committed offset, its record (offset 0) never applied")
          .isLessThanOrEqualTo(0);

      failing.set(false);
      container.start();
      await().atMost(Duration.ofSeconds(30)).until(() -> committed() == 1);
    } finally {
      container.stop();
    }
    assertThat(applied).containsExactly("pay M");
  }

  /**
   * A listener that acknowledges its record, then nacks it: spring-kafka committed the acknowledged
   * offset before seeking the nacked record back, so a stop during the nack's sleep lost the
   * record.
   */
  @Test
  void inManualAckModeARecordAcknowledgedThenNackedIsStillDeliveredAfterARestart()
      throws Exception {
    AtomicInteger calls = new AtomicInteger();
    CountDownLatch nacked = new CountDownLatch(1);
    List<String> applied = new CopyOnWriteArrayList<>();
    KafkaMessageListenerContainer<String, String> container =
        container(
            (AcknowledgingMessageListener<String, String>)
                (record, ack) -> {
                  Objects.requireNonNull(ack).acknowledge();
                  if (calls.incrementAndGet() == 1) {
                    ack.nack(Duration.ofSeconds(10));
                    nacked.countDown();
                    return;
                  }
                  applied.add(record.value());
                });
    container.getContainerProperties().setAckMode(ContainerProperties.AckMode.MANUAL);
    IdempotentRecordInterceptor.decorate(container, executor, "payment");
    container.start();
    try {
      send(List.of("pay A"));
      assertThat(nacked.await(30, TimeUnit.SECONDS)).isTrue();
      DedupKey key = DedupKey.of("payment", "A");
      await()
          .atMost(Duration.ofSeconds(30))
          .until(() -> executor.store().find(key).orElseThrow().status() == DedupStatus.FAILED);
      container.stop(); // during the nack's sleep
      assertThat(committed())
          .as("the group's committed offset, its record (offset 0) nacked and never applied")
          .isLessThanOrEqualTo(0);

      container.start();
      await().atMost(Duration.ofSeconds(30)).until(() -> committed() == 1);
    } finally {
      container.stop();
    }
    assertThat(applied).containsExactly("pay A");
  }

  /**
   * Ack mode MANUAL_IMMEDIATE: a listener applies its record and acknowledges it, but takes longer
   * than {@code max.poll.interval.ms}, so the consumer has left its group and the acknowledgment's
   * offset commit, passed on once the listener returned, fails. The listener's effects are applied:
   * the redelivery must find its key SUCCESS, not run it again.
   */
  @Test
  void anAcknowledgmentWhoseCommitFailsAfterTheListenerReturnedLeavesTheRecordAppliedOnce()
      throws Exception {
    AtomicInteger calls = new AtomicInteger();
    List<String> applied = new CopyOnWriteArrayList<>();
    KafkaMessageListenerContainer<String, String> container =
        container(
            (AcknowledgingMessageListener<String, String>)
                (record, ack) -> {
                  applied.add(record.value());
                  if (calls.incrementAndGet() == 1) {
                    try {
                      Thread.sleep(4_000); // past max.poll.interval.ms: the consumer leaves
                    } catch (InterruptedException e) {
                      Thread.currentThread().interrupt();
                    }
                  }
                  Objects.requireNonNull(ack).acknowledge();
                },
            Map.of(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, 1_500));
    container.getContainerProperties().setAckMode(ContainerProperties.AckMode.MANUAL_IMMEDIATE);
    AtomicInteger deliveries = new AtomicInteger();
    container.setRecordInterceptor(
        (record, consumer) -> {
          deliveries.incrementAndGet();
          return record;
        });
    IdempotentRecordInterceptor.decorate(container, executor, "payment");
    container.start();
    try {
      send(List.of("pay C"));
      await().atMost(Duration.ofSeconds(60)).until(() -> committed() == 1);
    } finally {
      container.stop();
    }
    // The fault was real: the first call's acknowledgment could not be committed.
    assertThat(deliveries)
        .as("deliveries: the one whose commit failed, then the redelivery")
        .hasValueGreaterThan(1);
    assertThat(applied)
        .as("the record applied (its redelivery a duplicate)")
        .containsExactly("pay C");
    assertThat(executor.store().find(DedupKey.of("payment", "C")).orElseThrow().status())
        .isEqualTo(DedupStatus.SUCCESS);
  }

  private long committed() throws Exception {
    OffsetAndMetadata offset =
        KafkaTestUtils.getCurrentOffset(TestKafka.bootstrapServers(), topic, topic, 0);
    return offset == null ? -1 : offset.offset();
  }

  @Test
  void aBatchListenerIsRefusedWithTheReason() {
    ContainerProperties batch = new ContainerProperties("t");
    batch.setMessageListener((BatchMessageListener<String, String>) records -> {});
    KafkaMessageListenerContainer<String, String> container =
        new KafkaMessageListenerContainer<>(new DefaultKafkaConsumerFactory<>(Map.of()), batch);

    assertThatThrownBy(() -> IdempotentRecordInterceptor.decorate(container, executor, "payment"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("batch listener");
  }

  @Test
  void aListenerReturningAFutureIsRefusedWithTheReason() {
    ContainerProperties properties = new ContainerProperties("t");
    properties.setMessageListener(new AsyncListener());
    KafkaMessageListenerContainer<String, String> container =
        new KafkaMessageListenerContainer<>(
            new DefaultKafkaConsumerFactory<>(Map.of()), properties);

    assertThatThrownBy(() -> IdempotentRecordInterceptor.decorate(container, executor, "payment"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("returns a CompletableFuture or Mono")
        .hasMessageContaining("@Idempotent");
  }

  @Test
  void aContainerWithAsyncAcksIsRefusedWithTheReason() {
    ContainerProperties properties = new ContainerProperties("t");
    properties.setAckMode(ContainerProperties.AckMode.MANUAL);
    properties.setAsyncAcks(true);
    properties.setMessageListener(
        (AcknowledgingMessageListener<String, String>) (record, ack) -> {});
    KafkaMessageListenerContainer<String, String> container =
        new KafkaMessageListenerContainer<>(
            new DefaultKafkaConsumerFactory<>(Map.of()), properties);

    assertThatThrownBy(() -> IdempotentRecordInterceptor.decorate(container, executor, "payment"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("asyncAcks");
  }

  /** What spring-kafka's adapter is for a {@code @KafkaListener} method returning a future. */
  private static final class AsyncListener
      implements MessageListener<String, String>, AsyncRepliesAware {
    @Override
    public void onMessage(ConsumerRecord<String, String> record) {}

    @Override
    public boolean isAsyncReplies() {
      return true;
    }
  }
}
