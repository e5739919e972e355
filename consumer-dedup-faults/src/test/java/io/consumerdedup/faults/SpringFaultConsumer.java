package io.consumerdedup.faults;

import io.consumerdedup.spring.Idempotent;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.SingleConnectionDataSource;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DeadLetterPublishingRecoverer;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.messaging.handler.annotation.Payload;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.util.backoff.FixedBackOff;

/**
 * The suite's consumer as a Spring Boot application: an {@code @Idempotent @KafkaListener} on the
 * auto-configured defaults of consumer-dedup-spring (its container, error handler, DataSource and
 * executor), as a user of the README's quick start has them. Only what the suite needs is set:
 * where Kafka and the database are, the group, the fast session timeout and static membership the
 * plain {@link FaultConsumer} uses, a short lease, and holds re-tried within 1 s as the plain
 * consumer's are (so a held key is taken over soon after its lease runs out).
 *
 * <p>It takes {@link FaultConsumer}'s arguments and handles keys the same way ({@code poison-}
 * always fails, {@code flaky-} fails once). {@code batched=true} makes the listener a batch
 * listener ({@code List<ConsumerRecord>}: one claim per poll), else it is a record listener. {@code
 * mode=TRANSACTIONAL} makes it a {@code @Transactional} listener in mode TRANSACTIONAL writing its
 * effect on the application's DataSource (the dedup table's), so both commit together; in mode
 * SEPARATE the effect goes to a connection of its own, committed at once. {@code deadLetters=true}
 * adds the error handler docs/spring-boot.md shows (a {@code DeadLetterPublishingRecoverer} to
 * {@code <topic>-dlt}, three attempts); without it the container keeps spring-kafka's default, or,
 * with {@code retryBackOffMs=<millis>}, a {@code DefaultErrorHandler} trying a failed record three
 * more times that far apart. {@code async=true} makes the record listener return a {@code
 * CompletableFuture} that applies the effect on another thread. {@code output=<topic>} makes it
 * consume-process-produce: each record in a Kafka transaction of the container (Spring Boot's
 * {@code transaction-id-prefix}), its effect a receipt produced to that topic instead of a row; a
 * key starting with {@code abort-} also sends, on its first try in any consumer, a record larger
 * than {@code audit=<topic>} accepts, so the broker refuses it and the transaction aborts after the
 * listener returned.
 *
 * <p>A record listener claims the keys of each poll together and has its SUCCESS marks written in
 * the background, in groups (the default); {@code claimsPerPoll=false} makes it claim and mark each
 * record on its own ({@code consumer-dedup.claims-per-poll=false}).
 *
 * <p>{@code fault=AFTER_HANDLER:halt:N} halts the JVM right after the N-th effect, before the
 * listener returns (SUCCESS not written: the window of mode SEPARATE), since the
 * {@code @Idempotent} path settles the claim in the interceptor, not at that fault point; {@code
 * fault=AFTER_HANDLER:stall<millis>:N} blocks the listener there instead (ended early by {@code
 * resume} on standard input). Other points are the library's ({@link FaultConsumer#installFault});
 * with claims per poll, {@code BEFORE_OFFSET_COMMIT} is reached once the SUCCESS marks of the polls
 * before are durable, before the commit that passes them and before the next poll's first listener
 * runs. {@code stop} on standard input closes the application cleanly (its container commits what
 * is done), as a rolling restart does.
 */
@SpringBootApplication
public class SpringFaultConsumer {
  private static final String AFTER_HANDLER = "AFTER_HANDLER:";

  public static void main(String[] args) throws Exception {
    Map<String, String> spec = new HashMap<>();
    for (String arg : args) {
      int eq = arg.indexOf('=');
      spec.put(arg.substring(0, eq), arg.substring(eq + 1));
    }
    String fault = spec.getOrDefault("fault", "");
    String listenerFault = "";
    if (fault.startsWith(AFTER_HANDLER)) {
      listenerFault = fault.substring(AFTER_HANDLER.length());
    } else {
      FaultConsumer.installFault(fault);
    }
    boolean transactional = "TRANSACTIONAL".equals(spec.get("mode"));
    boolean batchListener = Boolean.parseBoolean(spec.getOrDefault("batched", "false"));
    boolean acknowledging = Boolean.parseBoolean(spec.getOrDefault("acknowledge", "false"));
    boolean async = Boolean.parseBoolean(spec.getOrDefault("async", "false"));
    Map<String, Object> properties = new HashMap<>();
    properties.put("spring.main.banner-mode", "off");
    properties.put("spring.kafka.bootstrap-servers", spec.get("bootstrap"));
    properties.put("spring.kafka.consumer.group-id", spec.get("group"));
    properties.put("spring.kafka.consumer.auto-offset-reset", "earliest");
    properties.put("spring.kafka.consumer.max-poll-records", "50");
    properties.put("spring.kafka.consumer.heartbeat-interval", "1s");
    properties.put("spring.kafka.consumer.properties.session.timeout.ms", "6000");
    properties.put(
        "spring.kafka.consumer.properties.max.poll.interval.ms",
        spec.getOrDefault("maxPollIntervalMs", "20000"));
    // Static membership: a consumer started in a killed one's place takes its partitions at once.
    properties.put(
        "spring.kafka.consumer.properties.group.instance.id",
        spec.getOrDefault("slot", spec.get("name")));
    properties.put("spring.kafka.producer.properties.max.request.size", "2000000");
    properties.put("spring.kafka.listener.type", batchListener ? "batch" : "single");
    if (acknowledging) {
      properties.put("spring.kafka.listener.ack-mode", "manual");
    }
    properties.put("spring.datasource.url", spec.get("dedupJdbc"));
    properties.put("consumer-dedup.lease", spec.getOrDefault("leaseMs", "3000") + "ms");
    properties.put("consumer-dedup.hold.max-backoff", "1s");
    properties.put("consumer-dedup.mode", transactional ? "transactional" : "separate");
    properties.put("consumer-dedup.claims-per-poll", spec.getOrDefault("claimsPerPoll", "true"));
    String output = spec.getOrDefault("output", "");
    if (!output.isEmpty()) {
      // Consume-process-produce: each record in a Kafka transaction of the container. The prefix
      // is the slot's, so a consumer started in a killed one's place fences its open transaction.
      properties.put(
          "spring.kafka.producer.transaction-id-prefix",
          "faults-tx-" + spec.getOrDefault("slot", spec.get("name")) + "-");
      properties.put("spring.kafka.producer.properties.transaction.timeout.ms", "10000");
      properties.put("spring.kafka.consumer.isolation-level", "read_committed");
    }
    properties.put("faults.output", output);
    properties.put("faults.audit", spec.getOrDefault("audit", ""));
    properties.put("faults.name", spec.get("name"));
    properties.put("faults.topic", spec.get("topic"));
    properties.put("faults.effects-jdbc", spec.get("effectsJdbc"));
    properties.put("faults.handler-ms", spec.getOrDefault("handlerMs", "2"));
    properties.put("faults.listener-fault", listenerFault);
    properties.put("faults.transactional", transactional);
    if (spec.containsKey("retryBackOffMs")) {
      properties.put("faults.retry-back-off-ms", spec.get("retryBackOffMs"));
    }
    properties.put("faults.dead-letters", spec.getOrDefault("deadLetters", "false"));
    // The listener of the shape asked for, a bean of the application.
    Class<?> listener =
        batchListener
            ? (acknowledging ? AcknowledgingOrderBatchListener.class : OrderBatchListener.class)
            : transactional
                ? TransactionalOrderListener.class
                : async ? AsyncOrderListener.class : OrderListener.class;
    SpringApplication application = new SpringApplication(SpringFaultConsumer.class, listener);
    application.setDefaultProperties(properties);
    ConfigurableApplicationContext context = application.run();
    FaultConsumer.announce("STARTED");
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    String line;
    while ((line = in.readLine()) != null) {
      if (line.equals("resume")) {
        FaultConsumer.RESUME.countDown();
      }
      if (line.equals("stop")) {
        context.close();
        FaultConsumer.announce("STOPPED");
        Runtime.getRuntime().halt(0);
      }
    }
  }

  @Bean
  Orders orders(
      @Value("${faults.name}") String name,
      @Value("${faults.effects-jdbc}") String effectsJdbc,
      @Value("${faults.handler-ms}") long handlerMillis,
      @Value("${faults.listener-fault}") String listenerFault,
      @Value("${faults.transactional}") boolean transactional,
      @Value("${faults.output}") String output,
      @Value("${faults.audit}") String audit,
      DataSource dataSource,
      KafkaTemplate<Object, Object> kafka) {
    // Not a bean: the application's one DataSource stays the auto-configured dedup one.
    DataSource ownConnection = new SingleConnectionDataSource(effectsJdbc, true);
    Effect effect;
    if (output.isEmpty()) {
      JdbcTemplate effects = new JdbcTemplate(transactional ? dataSource : ownConnection);
      effect =
          orderNo ->
              effects.update(
                  "INSERT INTO effects (biz_key, consumer) VALUES (?, ?)", orderNo, name);
    } else {
      effect =
          orderNo -> {
            kafka.send(output, orderNo, "receipt for " + orderNo + " from " + name);
            if (orderNo.startsWith("abort-")
                && FaultConsumer.firstFailure(ownConnection, orderNo)) {
              // Larger than the audit topic accepts: the broker refuses it, so the transaction
              // cannot commit after the listener returned.
              kafka.send(audit, orderNo, "x".repeat(2_000));
            }
          };
    }
    return new Orders(effect, ownConnection, handlerMillis, listenerFault);
  }

  /** What the listener does for an order: a row of {@code effects}, or a receipt produced. */
  @FunctionalInterface
  interface Effect {
    void apply(String orderNo) throws Exception;
  }

  /** The wiring docs/spring-boot.md shows, to the topic the suite reads dead letters from. */
  @Bean
  @ConditionalOnProperty(name = "faults.dead-letters", havingValue = "true")
  DefaultErrorHandler errorHandler(KafkaTemplate<Object, Object> template) {
    // Partition -1: the dead-letter topic has one partition, Kafka picks it.
    DeadLetterPublishingRecoverer deadLetters =
        new DeadLetterPublishingRecoverer(
            template, (record, e) -> new TopicPartition(record.topic() + FaultRun.DLT_SUFFIX, -1));
    return new DefaultErrorHandler(deadLetters, new FixedBackOff(200, 2));
  }

  /**
   * The application's own error handler with a long back-off between attempts of a failed record,
   * as docs/spring-boot.md says an application may have: a restart falls within it.
   */
  @Bean
  @ConditionalOnProperty(name = "faults.retry-back-off-ms")
  DefaultErrorHandler retryingErrorHandler(@Value("${faults.retry-back-off-ms}") long backOffMs) {
    return new DefaultErrorHandler(new FixedBackOff(backOffMs, 3));
  }

  /** A record listener, mode SEPARATE (the default). */
  static class OrderListener {
    private final Orders orders;

    OrderListener(Orders orders) {
      this.orders = orders;
    }

    @Idempotent(
        bizType = FaultConsumer.BIZ_TYPE,
        header = FaultConsumer.KEY_HEADER,
        fingerprint = "#record.value()")
    @KafkaListener(topics = "${faults.topic}")
    public void apply(
        @Payload(required = false) String payload, @Header(FaultConsumer.KEY_HEADER) String orderNo)
        throws Exception {
      orders.apply(orderNo);
    }
  }

  /**
   * A record listener returning a {@code CompletableFuture}: the effect applied on another thread.
   */
  static class AsyncOrderListener {
    private final Orders orders;

    AsyncOrderListener(Orders orders) {
      this.orders = orders;
    }

    @Idempotent(
        bizType = FaultConsumer.BIZ_TYPE,
        header = FaultConsumer.KEY_HEADER,
        fingerprint = "#record.value()")
    @KafkaListener(topics = "${faults.topic}")
    public CompletableFuture<Void> apply(
        @Payload(required = false) String payload,
        @Header(FaultConsumer.KEY_HEADER) String orderNo) {
      return CompletableFuture.runAsync(
          () -> {
            try {
              orders.apply(orderNo);
            } catch (Exception e) {
              throw new CompletionException(e);
            }
          });
    }
  }

  /** A record listener in mode TRANSACTIONAL: the effect and the dedup row commit together. */
  static class TransactionalOrderListener {
    private final Orders orders;

    TransactionalOrderListener(Orders orders) {
      this.orders = orders;
    }

    @Transactional
    @Idempotent(
        bizType = FaultConsumer.BIZ_TYPE,
        header = FaultConsumer.KEY_HEADER,
        fingerprint = "#record.value()")
    @KafkaListener(topics = "${faults.topic}")
    public void apply(
        @Payload(required = false) String payload, @Header(FaultConsumer.KEY_HEADER) String orderNo)
        throws Exception {
      orders.apply(orderNo);
    }
  }

  /** A batch listener, mode SEPARATE: one claim per poll, the effects one by one. */
  static class OrderBatchListener {
    private final Orders orders;

    OrderBatchListener(Orders orders) {
      this.orders = orders;
    }

    @Idempotent(bizType = FaultConsumer.BIZ_TYPE, header = FaultConsumer.KEY_HEADER)
    @KafkaListener(topics = "${faults.topic}")
    public void apply(List<ConsumerRecord<String, String>> records) throws Exception {
      for (ConsumerRecord<String, String> record : records) {
        orders.apply(FaultConsumer.keyOf(record));
      }
    }
  }

  /**
   * A batch listener in manual ack mode that acknowledges each record after its effect, as
   * docs/spring-boot.md advises to shrink a batch listener's crash window.
   */
  static class AcknowledgingOrderBatchListener {
    private final Orders orders;

    AcknowledgingOrderBatchListener(Orders orders) {
      this.orders = orders;
    }

    @Idempotent(bizType = FaultConsumer.BIZ_TYPE, header = FaultConsumer.KEY_HEADER)
    @KafkaListener(topics = "${faults.topic}")
    public void apply(List<ConsumerRecord<String, String>> records, Acknowledgment ack)
        throws Exception {
      for (int i = 0; i < records.size(); i++) {
        orders.apply(FaultConsumer.keyOf(records.get(i)));
        ack.acknowledge(i);
      }
    }
  }

  /** What each listener does with an order, and the faults it injects there. */
  static class Orders {
    private final Effect effect;
    private final DataSource failures;
    private final long handlerMillis;
    private final String fault;
    private final int faultAfterEffect;
    private final AtomicInteger applied = new AtomicInteger();

    Orders(Effect effect, DataSource failures, long handlerMillis, String listenerFault) {
      this.effect = effect;
      this.failures = failures;
      this.handlerMillis = handlerMillis;
      // "halt:N" or "stall<millis>:N"
      String[] parts = listenerFault.split(":");
      this.fault = parts[0];
      this.faultAfterEffect = listenerFault.isEmpty() ? 0 : Integer.parseInt(parts[1]);
    }

    void apply(String orderNo) throws Exception {
      if (handlerMillis > 0) {
        Thread.sleep(handlerMillis);
      }
      if (orderNo.startsWith("poison-")) {
        throw new IllegalStateException("poison record " + orderNo + " always fails");
      }
      if (orderNo.startsWith("flaky-") && FaultConsumer.firstFailure(failures, orderNo)) {
        throw new IllegalStateException("transient failure of " + orderNo);
      }
      effect.apply(orderNo);
      int count = applied.incrementAndGet();
      if (count == 1) {
        FaultConsumer.announce("APPLIED");
      }
      if (count != faultAfterEffect) {
        return;
      }
      FaultConsumer.announce("FAULT AFTER_HANDLER " + fault);
      if (fault.equals("halt")) {
        Runtime.getRuntime().halt(137);
      }
      FaultConsumer.stall(Long.parseLong(fault.substring("stall".length())));
      FaultConsumer.announce("RESUMED AFTER_HANDLER");
    }
  }
}
