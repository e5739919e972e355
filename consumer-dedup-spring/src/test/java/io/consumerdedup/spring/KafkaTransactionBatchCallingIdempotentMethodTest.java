package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.ConcurrentKafkaListenerContainerFactoryConfigurer;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.BatchInterceptor;
import org.springframework.kafka.listener.ConcurrentMessageListenerContainer;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.util.backoff.FixedBackOff;

/**
 * A plain batch listener (not {@code @Idempotent}) in a container running a Kafka transaction,
 * calling an {@code @Idempotent} method of another bean once per record with the record. Each call
 * writes to the database (outside the Kafka transaction) and sends its output in the transaction:
 * its claim is settled with the batch's transaction, SUCCESS once it commits, FAILED once it rolls
 * back.
 */
@SpringBootTest(
    classes = KafkaTransactionBatchCallingIdempotentMethodTest.App.class,
    properties = {
      "spring.kafka.producer.transaction-id-prefix=dedup-batch-calling-",
      "spring.kafka.consumer.properties.isolation.level=read_committed"
    })
@DirtiesContext
class KafkaTransactionBatchCallingIdempotentMethodTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String ORDERS = "tx-batch-calling-orders";
  static final String CHARGES = "tx-batch-calling-charges";
  static final String BROKEN = "tx-batch-calling-broken";
  static final String TWICE = "tx-batch-calling-twice";
  static final String RETRIED = "tx-batch-calling-retried";
  static final List<String> failures = new CopyOnWriteArrayList<>();
  static final Map<String, AtomicInteger> calls = new ConcurrentHashMap<>();

  /** The order numbers of each batch delivered to the listener of {@link #TWICE}. */
  static final List<List<String>> twiceBatches = new CopyOnWriteArrayList<>();

  /** How often the listener of {@link #RETRIED} was given its batch. */
  static final AtomicInteger retriedRuns = new AtomicInteger();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry, "spring_tx_batch_calling", ORDERS, CHARGES, BROKEN, TWICE, RETRIED);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired DedupStore store;
  @Autowired JdbcTemplate jdbc;
  @Autowired KafkaListenerEndpointRegistry registry;

  @Test
  void eachKeyIsRecordedSuccessOnceTheBatchCommitsAndACopyIsNotAppliedAgain() throws Exception {
    send("charge 1", "TB-1");
    long second = send("charge 2", "TB-2");
    await().atMost(WAIT).until(() -> committed() > second);

    long copy = send("charge 1 again", "TB-1");
    await().atMost(WAIT).until(() -> committed() > copy);

    assertThat(failures)
        .as("failed batches")
        .noneMatch(failure -> failure.contains(DedupConfigurationException.class.getName()));
    for (String orderNo : List.of("TB-1", "TB-2")) {
      assertThat(SpringTestEnvironment.effects(jdbc, "charge", orderNo))
          .as("charges written for " + orderNo)
          .isEqualTo(1);
      assertThat(committedCharges(orderNo)).as("charges sent for " + orderNo).hasSize(1);
      DedupRecord record = store.find(DedupKey.of("tx-batch-charge", orderNo)).orElseThrow();
      assertThat(record.status()).as(orderNo).isEqualTo(DedupStatus.SUCCESS);
      assertThat(record.attempts()).as("attempts of " + orderNo).isEqualTo(1);
    }
    assertThat(calls.get("TB-1")).as("calls for TB-1, its copy a duplicate").hasValue(1);
  }

  /**
   * The listener throws after the call for the record returned: the batch's transaction rolls back,
   * the charge sent in it is discarded, and the key is FAILED, so the redelivery charges it again
   * and is recorded SUCCESS.
   */
  @Test
  void aBatchThatRollsBackAfterTheCallLeavesItsKeyToTheRedelivery() throws Exception {
    long offset = send("charge 3", "TB-3");
    await().atMost(WAIT).until(() -> committed() > offset);

    assertThat(calls.get("TB-3")).as("the rolled-back call, then the redelivery").hasValue(2);
    DedupRecord record = store.find(DedupKey.of("tx-batch-charge", "TB-3")).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).isEqualTo(2);
    assertThat(committedCharges("TB-3")).as("charges sent").hasSize(1);
  }

  /**
   * The listener throws an {@code Error} after the call returned: the container rolls the batch's
   * transaction back and stops, reporting no end of the batch. The key is FAILED, not left
   * PROCESSING nor recorded SUCCESS, and the restarted container charges it.
   */
  @Test
  void anErrorAfterTheCallLeavesTheKeyFailedAndTheRestartAppliesIt() throws Exception {
    ConcurrentMessageListenerContainer<?, ?> container =
        (ConcurrentMessageListenerContainer<?, ?>) registry.getListenerContainer(BROKEN);
    long offset = sendTo(BROKEN, "charge 4", "TB-4");

    await()
        .atMost(WAIT)
        .until(() -> container.getContainers().stream().noneMatch(c -> c.isRunning()));
    await()
        .atMost(WAIT)
        .until(
            () ->
                store.find(DedupKey.of("tx-batch-charge", "TB-4")).orElseThrow().status()
                    == DedupStatus.FAILED);
    assertThat(committedCharges("TB-4")).as("charges sent before the restart").isEmpty();

    container.stop();
    container.start();
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(BROKEN, BROKEN, 0) > offset);
    assertThat(calls.get("TB-4")).as("the call before the Error, then the redelivery").hasValue(2);
    assertThat(store.find(DedupKey.of("tx-batch-charge", "TB-4")).orElseThrow().status())
        .isEqualTo(DedupStatus.SUCCESS);
    assertThat(committedCharges("TB-4")).as("charges sent").hasSize(1);
  }

  /**
   * A producer's retry next to its original in one poll: the second copy of the key is a duplicate
   * of the first, applied in the same transaction. Asked of the store, it met the first call's
   * claim, still open until the batch commits, as "in progress": the batch rolled back and came
   * again, charging each time, until its attempts were spent.
   */
  @Test
  void aKeyTwiceInOneBatchIsAppliedOnceAndTheBatchCommits() throws Exception {
    long last = sendTogether(TWICE, "TB-5", "charge 5", "charge 5, the producer's retry");
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(TWICE, TWICE, 0) > last);

    assertThat(batchesOf("TB-5")).as("batches delivered").containsExactly(List.of("TB-5", "TB-5"));
    assertThat(calls.get("TB-5")).as("calls, the copy a duplicate").hasValue(1);
    assertThat(SpringTestEnvironment.effects(jdbc, "charge", "TB-5")).as("charges written").isOne();
    assertThat(committedCharges("TB-5")).as("charges sent").hasSize(1);
    DedupRecord record = store.find(DedupKey.of("tx-batch-charge", "TB-5")).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).as("attempts").isOne();
  }

  /**
   * The first copy's call fails and the listener goes on: the second copy is no duplicate of a
   * failure. It runs under the same claim, and its success is the key's, once the batch commits.
   */
  @Test
  void aKeyWhoseFirstCallFailedInTheBatchIsAppliedByItsSecondCopy() throws Exception {
    long last = sendTogether(TWICE, "TB-6", "charge 6 declined", "charge 6");
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(TWICE, TWICE, 0) > last);

    assertThat(batchesOf("TB-6")).as("batches delivered").containsExactly(List.of("TB-6", "TB-6"));
    assertThat(calls.get("TB-6")).as("the declined call, then the copy").hasValue(2);
    assertThat(SpringTestEnvironment.effects(jdbc, "charge", "TB-6")).as("charges written").isOne();
    assertThat(committedCharges("TB-6")).as("charges sent").hasSize(1);
    DedupRecord record = store.find(DedupKey.of("tx-batch-charge", "TB-6")).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).as("attempts").isOne();
  }

  /**
   * The application's own error handler runs the listener again in memory, within the poll and the
   * transaction of the first try: the retry's call is a duplicate of the first try's, whose effects
   * commit with the batch. It met that call's claim, still open, as "in progress" at each retry.
   */
  @Test
  void anInMemoryRetryOfTheBatchDoesNotApplyItsCallsAgain() throws Exception {
    long offset = sendTo(RETRIED, "charge 7", "TB-7");
    await().atMost(WAIT).until(() -> SpringTestEnvironment.committed(RETRIED, RETRIED, 0) > offset);

    assertThat(retriedRuns).as("the first try, then the retry").hasValue(2);
    assertThat(calls.get("TB-7")).as("calls, the retry's a duplicate").hasValue(1);
    assertThat(SpringTestEnvironment.effects(jdbc, "charge", "TB-7")).as("charges written").isOne();
    assertThat(committedCharges("TB-7")).as("charges sent").hasSize(1);
    DedupRecord record = store.find(DedupKey.of("tx-batch-charge", "TB-7")).orElseThrow();
    assertThat(record.status()).isEqualTo(DedupStatus.SUCCESS);
    assertThat(record.attempts()).as("attempts").isOne();
  }

  /** The batches delivered to the listener of {@link #TWICE} holding {@code orderNo}. */
  private static List<List<String>> batchesOf(String orderNo) {
    return twiceBatches.stream().filter(batch -> batch.contains(orderNo)).toList();
  }

  /**
   * Sends {@code values} for {@code orderNo} in one transaction, so that a consumer reading
   * committed records gets them in one poll; returns the last one's offset.
   */
  private long sendTogether(String topic, String orderNo, String... values) throws Exception {
    return template.executeInTransaction(
        t -> {
          long offset = -1;
          for (String value : values) {
            ProducerRecord<String, String> record = new ProducerRecord<>(topic, value);
            record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
            try {
              offset = t.send(record).get().getRecordMetadata().offset();
            } catch (Exception e) {
              throw new IllegalStateException(e);
            }
          }
          return offset;
        });
  }

  private long send(String value, String orderNo) throws Exception {
    return sendTo(ORDERS, value, orderNo);
  }

  /** Sends in a transaction of its own; returns the record's offset. */
  private long sendTo(String topic, String value, String orderNo) throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, value);
    record.headers().add("order-no", orderNo.getBytes(StandardCharsets.UTF_8));
    return template.executeInTransaction(t -> t.send(record)).get().getRecordMetadata().offset();
  }

  private static long committed() throws Exception {
    return SpringTestEnvironment.committed(ORDERS, ORDERS, 0);
  }

  private static List<String> committedCharges(String orderNo) {
    return SpringTestEnvironment.readWritten(CHARGES, "read_committed").stream()
        .filter(record -> orderNo.equals(record.key()))
        .map(ConsumerRecord::value)
        .toList();
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Charges charges(KafkaTemplate<String, String> template, JdbcTemplate jdbc) {
      return new Charges(template, jdbc);
    }

    @Bean
    BatchListener batchListener(Charges charges) {
      return new BatchListener(charges);
    }

    /** Retries a failed batch in memory, twice, inside its transaction. */
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> inMemoryRetries(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.setCommonErrorHandler(new DefaultErrorHandler(new FixedBackOff(0, 2)));
      return factory;
    }

    /** Records what each failed batch threw, with every cause. */
    @Bean
    BatchInterceptor<Object, Object> failureRecorder() {
      return SpringTestEnvironment.batchFailureRecorder(failures);
    }
  }

  static class Charges {
    final KafkaTemplate<String, String> template;
    final JdbcTemplate jdbc;

    Charges(KafkaTemplate<String, String> template, JdbcTemplate jdbc) {
      this.template = template;
      this.jdbc = jdbc;
    }

    @Idempotent(bizType = "tx-batch-charge", header = "order-no")
    public void charge(ConsumerRecord<String, String> record) {
      String orderNo = SpringTestEnvironment.header(record, "order-no");
      calls.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet();
      if (record.value().endsWith("declined")) {
        throw new Declined(orderNo);
      }
      SpringTestEnvironment.effect(jdbc, "charge", orderNo, record.value());
      template.send(CHARGES, orderNo, "charge for " + orderNo);
    }
  }

  /** A charge refused before anything was written. */
  static class Declined extends RuntimeException {
    Declined(String orderNo) {
      super("card declined for " + orderNo);
    }
  }

  static class BatchListener {
    final Charges charges;

    BatchListener(Charges charges) {
      this.charges = charges;
    }

    /** Charges each record; the first delivery of TB-3 then fails its batch. */
    @KafkaListener(id = ORDERS, topics = ORDERS, batch = "true")
    public void chargeAll(List<ConsumerRecord<String, String>> records) {
      for (ConsumerRecord<String, String> record : records) {
        charges.charge(record);
        String orderNo = SpringTestEnvironment.header(record, "order-no");
        if (orderNo.equals("TB-3") && calls.get(orderNo).get() == 1) {
          throw new IllegalStateException("the batch's bookkeeping failed after the charge");
        }
      }
    }

    /** Charges each record, going on past a declined charge. */
    @KafkaListener(id = TWICE, topics = TWICE, batch = "true")
    public void chargeEach(List<ConsumerRecord<String, String>> records) {
      twiceBatches.add(
          records.stream().map(r -> SpringTestEnvironment.header(r, "order-no")).toList());
      for (ConsumerRecord<String, String> record : records) {
        try {
          charges.charge(record);
        } catch (Declined e) {
          // Left FAILED unless a later copy in the batch succeeds.
        }
      }
    }

    /** Charges each record, then fails the first try with an exception naming no record. */
    @KafkaListener(
        id = RETRIED,
        topics = RETRIED,
        batch = "true",
        containerFactory = "inMemoryRetries")
    public void chargeAllThenFailOnce(List<ConsumerRecord<String, String>> records) {
      int run = retriedRuns.incrementAndGet();
      for (ConsumerRecord<String, String> record : records) {
        charges.charge(record);
      }
      if (run == 1) {
        throw new IllegalStateException("the batch's bookkeeping failed after the charges");
      }
    }

    /** Charges each record, then fails the first delivery with an Error. */
    @KafkaListener(id = BROKEN, topics = BROKEN, batch = "true")
    public void chargeAllThenBreak(List<ConsumerRecord<String, String>> records) {
      for (ConsumerRecord<String, String> record : records) {
        charges.charge(record);
        if (calls.get(SpringTestEnvironment.header(record, "order-no")).get() == 1) {
          throw new AssertionError("the batch's bookkeeping library broke");
        }
      }
    }
  }
}
