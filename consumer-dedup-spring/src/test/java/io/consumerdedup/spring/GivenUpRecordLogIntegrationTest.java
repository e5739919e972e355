package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.readTopic;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.testing.TestKafka;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.BackOff;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.annotation.RetryableTopic;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DeadLetterPublishingRecoverer;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.RetryListener;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.util.backoff.ExponentialBackOff;

/**
 * The dead-letter wiring of the docs: a {@code DeadLetterPublishingRecoverer} publishes without
 * logging, so a record could leave for the dead-letter topic with nothing in the application's log.
 * Each record given up is logged at ERROR, once, with why: a key expression that fails on it
 * (named), or the listener's last exception once the error handler's retries are spent; and the
 * application's own retry listener still hears of it.
 */
@SpringBootTest(
    classes = GivenUpRecordLogIntegrationTest.App.class,
    properties = "logging.level.io.consumerdedup.spring.internal.RecoveredRecordLogger=DEBUG")
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class GivenUpRecordLogIntegrationTest {
  static final Duration WAIT = Duration.ofSeconds(60);
  static final String KEYLESS = "given-up-key";
  static final String FAILING = "given-up-fail";
  static final String RETRYABLE = "given-up-retryable";
  static final String EXPRESSION = "#headers['order-no'].trim()";
  static final String REFUSED = "given-up-refused";
  static final String MAX_MESSAGE_BYTES = "max.message.bytes";
  static final String REFUSED_BATCH = "given-up-refused-batch";

  /** The dead-letter topics' limit, below the size of the records given up there. */
  static final String SMALL_LIMIT = "1000";

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(
        registry,
        "spring_given_up",
        KEYLESS,
        KEYLESS + "-dlt",
        FAILING,
        FAILING + "-dlt",
        RETRYABLE,
        RETRYABLE + "-retry",
        RETRYABLE + "-dlt",
        REFUSED,
        REFUSED_BATCH);
    for (String topic : List.of(REFUSED, REFUSED_BATCH)) {
      TestKafka.createTopic(topic + "-dlt", 1, Map.of(MAX_MESSAGE_BYTES, SMALL_LIMIT));
    }
  }

  @Autowired KafkaTemplate<String, String> template;

  @Test
  void eachRecordWhoseKeyExpressionFailsIsLoggedOnceAtErrorNamingTheExpression(
      CapturedOutput output) throws Exception {
    for (int i = 0; i < 3; i++) {
      send(template, KEYLESS, "order without its header " + i);
    }

    assertThat(readTopic(KEYLESS + "-dlt", 3, WAIT)).hasSize(3);
    await().atMost(WAIT).until(() -> ApplicationRetryListener.recovered.get() >= 3);
    List<String> errors = errorLines(output, KEYLESS + "-0@");
    assertThat(errors).as("ERROR lines, one per record").hasSize(3);
    for (int offset = 0; offset < 3; offset++) {
      String record = KEYLESS + "-0@" + offset + " ";
      assertThat(errors)
          .filteredOn(line -> line.contains("Gave up on " + record))
          .singleElement()
          .satisfies(
              line ->
                  assertThat(line)
                      .contains("key expression '" + EXPRESSION + "'")
                      .contains("EL1011E"));
    }
  }

  @Test
  void aRecordWhoseErrorHandlerRetriesAreSpentIsLoggedOnceAtErrorWithItsLastException(
      CapturedOutput output) throws Exception {
    send(template, FAILING, "charge 9.00", "order-no", "G-1");

    List<ConsumerRecord<String, String>> deadLetters = readTopic(FAILING + "-dlt", 1, WAIT);
    assertThat(deadLetters).hasSize(1);
    await().until(() -> !errorLines(output, FAILING + "-0@0").isEmpty());
    assertThat(Charges.calls).as("two deliveries, as the back-off allows").hasValue(2);
    assertThat(errorLines(output, FAILING + "-0@0"))
        .singleElement()
        .satisfies(
            line ->
                assertThat(line)
                    .contains("Gave up on " + FAILING + "-0@0")
                    .contains("handed to the error handler's recoverer")
                    .contains("java.lang.IllegalStateException: card declined"));
  }

  /**
   * In a {@code @RetryableTopic} chain the error handler's recoverer forwards a failed record to
   * the next retry topic: not a record given up, so no ERROR line.
   */
  @Test
  void aRecordForwardedToARetryTopicIsNotLoggedAsGivenUp(CapturedOutput output) throws Exception {
    send(template, RETRYABLE, "charge 3.00", "order-no", "R-1");

    await().atMost(WAIT).until(() -> Retries.succeeded.get() == 1);
    assertThat(Retries.calls).hasValue(2);
    assertThat(output.getAll())
        .contains("key given-up-retryable/R-1, attempt 1 of 10")
        .doesNotContain("Gave up on " + RETRYABLE);
  }

  /**
   * A record given up whose dead letter the dead-letter topic refuses (larger than its {@code
   * max.message.bytes}) until the limit is raised: it waits a growing back-off between tries, the
   * failure logged at ERROR once (at DEBUG after), never committed without its dead letter.
   */
  @Test
  void aRecordWhoseDeadLetterIsRefusedWaitsAGrowingBackOffLoggedOnceAtError(CapturedOutput output)
      throws Exception {
    long offset = send(template, REFUSED, "x".repeat(2_000)); // no order-no header: given up

    assertDeadLetterHeldUntilAccepted(output, REFUSED, offset);
  }

  @Test
  void aBatchRecordWhoseDeadLetterIsRefusedWaitsAGrowingBackOffLoggedOnceAtError(
      CapturedOutput output) throws Exception {
    send(template, REFUSED_BATCH, "small", "order-no", "RB-1");
    long offset = send(template, REFUSED_BATCH, "x".repeat(2_000));

    assertDeadLetterHeldUntilAccepted(output, REFUSED_BATCH, offset);
    assertThat(RefusedDeadLetters.applied).containsExactly("RB-1");
  }

  /**
   * The dead letter of {@code topic}'s record at {@code offset} is refused (its dead-letter topic
   * created with {@link #SMALL_LIMIT}): the record waits a growing back-off, logged at ERROR once,
   * until the limit is raised, then is dead-lettered and committed past.
   */
  static void assertDeadLetterHeldUntilAccepted(CapturedOutput output, String topic, long offset)
      throws Exception {
    String record = topic + "-0@" + offset;
    List<Long> tries = CountingDeadLetters.tries(topic);
    await().atMost(WAIT).until(() -> tries.size() >= 3);
    assertThat(readTopic(topic + "-dlt", 1, Duration.ofMillis(200)))
        .as("dead letters written while the topic refuses them")
        .isEmpty();
    assertThat(SpringTestEnvironment.committed(topic, topic, 0))
        .as("committed offset while the dead letter is refused")
        .isLessThanOrEqualTo(offset);
    int seen = tries.size();
    assertThat(errorLines(output, "recoverer failed for " + record))
        .as("ERROR lines of the failed recovery over %d tries", seen)
        .hasSize(1);
    assertThat(
            output
                .getAll()
                .lines()
                .filter(line -> line.contains(" DEBUG ") && line.contains(record))
                .filter(line -> line.contains("recoverer failed for"))
                .toList())
        .as("the later tries, at DEBUG, each waiting longer")
        .anySatisfy(line -> assertThat(line).contains("trying again in PT2S"));
    assertThat(Duration.ofNanos(tries.get(2) - tries.get(1)))
        .as("wait before the third try")
        .isGreaterThanOrEqualTo(Duration.ofMillis(1_500));

    try (Admin admin =
        Admin.create(
            Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, TestKafka.bootstrapServers()))) {
      admin
          .incrementalAlterConfigs(
              Map.of(
                  new ConfigResource(ConfigResource.Type.TOPIC, topic + "-dlt"),
                  List.of(
                      new AlterConfigOp(
                          new ConfigEntry(MAX_MESSAGE_BYTES, "1048588"),
                          AlterConfigOp.OpType.SET))))
          .all()
          .get();
    }
    assertThat(readTopic(topic + "-dlt", 1, WAIT)).hasSize(1);
    await()
        .atMost(WAIT)
        .until(() -> SpringTestEnvironment.committed(topic, topic, 0) == offset + 1);
    // One dead letter (by count, not offset: in Kafka transactions aborted ones leave markers).
    assertThat(readTopic(topic + "-dlt", 2, Duration.ofMillis(500))).hasSize(1);
  }

  private static List<String> errorLines(CapturedOutput output, String record) {
    return output
        .getAll()
        .lines()
        .filter(line -> line.contains(" ERROR ") && line.contains(record))
        .toList();
  }

  /** The application's own retry listener, which consumer-dedup's logger must not replace. */
  static final class ApplicationRetryListener implements RetryListener {
    static final AtomicInteger recovered = new AtomicInteger();

    @Override
    public void failedDelivery(ConsumerRecord<?, ?> record, Exception ex, int deliveryAttempt) {}

    @Override
    public void recovered(ConsumerRecord<?, ?> record, Exception ex) {
      recovered.incrementAndGet();
    }
  }

  /** The docs' recoverer, noting when it is tried, per topic. */
  static final class CountingDeadLetters extends DeadLetterPublishingRecoverer {
    static final Map<String, List<Long>> tries = new ConcurrentHashMap<>();

    CountingDeadLetters(KafkaTemplate<Object, Object> template) {
      super(template);
    }

    static List<Long> tries(String topic) {
      return tries.computeIfAbsent(topic, t -> new CopyOnWriteArrayList<>());
    }

    @Override
    public void accept(ConsumerRecord<?, ?> record, Consumer<?, ?> consumer, Exception exception) {
      tries(record.topic()).add(System.nanoTime());
      super.accept(record, consumer, exception);
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    /** The docs' wiring, its back-off bounded to one retry. */
    @Bean
    DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
      ExponentialBackOff backOff = new ExponentialBackOff(100, 2.0);
      backOff.setMaxAttempts(1);
      DefaultErrorHandler handler =
          new DefaultErrorHandler(new CountingDeadLetters(template), backOff);
      handler.setRetryListeners(new ApplicationRetryListener());
      return handler;
    }

    @Bean
    Orders orders() {
      return new Orders();
    }

    @Bean
    Charges charges() {
      return new Charges();
    }

    @Bean
    Retries retries() {
      return new Retries();
    }

    @Bean
    RefusedDeadLetters refusedDeadLetters() {
      return new RefusedDeadLetters();
    }
  }

  static class RefusedDeadLetters {
    static final List<String> applied = new CopyOnWriteArrayList<>();

    @Idempotent(bizType = "given-up-refused", header = "order-no")
    @KafkaListener(id = REFUSED, topics = REFUSED)
    public void place(String payload) {
      applied.add(payload);
    }

    @Idempotent(bizType = "given-up-refused-batch", header = "order-no")
    @KafkaListener(id = REFUSED_BATCH, topics = REFUSED_BATCH, batch = "true")
    public void placeAll(List<ConsumerRecord<String, String>> records) {
      records.forEach(record -> applied.add(SpringTestEnvironment.header(record, "order-no")));
    }
  }

  static class Orders {
    @Idempotent(bizType = "given-up-order", key = EXPRESSION)
    @KafkaListener(id = KEYLESS, topics = KEYLESS)
    public void place(String payload) {}
  }

  static class Retries {
    static final AtomicInteger calls = new AtomicInteger();
    static final AtomicInteger succeeded = new AtomicInteger();

    @RetryableTopic(attempts = "2", backOff = @BackOff(delay = 100))
    @Idempotent(bizType = "given-up-retryable", header = "order-no")
    @KafkaListener(id = RETRYABLE, topics = RETRYABLE)
    public void charge(String payload) {
      if (calls.incrementAndGet() == 1) {
        throw new IllegalStateException("bank busy");
      }
      succeeded.incrementAndGet();
    }
  }

  static class Charges {
    static final AtomicInteger calls = new AtomicInteger();

    @Idempotent(bizType = "given-up-charge", header = "order-no")
    @KafkaListener(id = FAILING, topics = FAILING)
    public void charge(String payload) {
      calls.incrementAndGet();
      throw new IllegalStateException("card declined");
    }
  }
}
