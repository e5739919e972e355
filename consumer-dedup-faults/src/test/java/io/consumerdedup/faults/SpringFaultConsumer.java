package io.consumerdedup.faults;

import io.consumerdedup.spring.Idempotent;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.SingleConnectionDataSource;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.messaging.handler.annotation.Header;

/**
 * The suite's consumer as a Spring Boot application: one {@code @Idempotent @KafkaListener} on the
 * auto-configured defaults of consumer-dedup-spring (its container, error handler, DataSource and
 * executor), as a user of the README's quick start has them. Only what the suite needs is set:
 * where Kafka and PostgreSQL are, the group, the fast session timeout and static membership the
 * plain {@link FaultConsumer} uses, a short lease, and holds re-tried within 1 s as the plain
 * consumer's are (so a held key is taken over soon after its lease runs out).
 *
 * <p>It takes {@link FaultConsumer}'s arguments (mode SEPARATE, one record per listener call). The
 * listener writes its effect as a row of {@code effects} on a connection of its own, committed at
 * once. {@code fault=AFTER_CLAIM:halt:N} and {@code fault=AFTER_SUCCESS_MARK:halt:N} halt the JVM
 * at the library's fault points; {@code fault=AFTER_HANDLER:halt:N} halts it right after the N-th
 * effect, before the listener returns (SUCCESS not written: the window of mode SEPARATE), since the
 * {@code @Idempotent} path settles the claim in the interceptor, not at that fault point.
 */
@SpringBootApplication
public class SpringFaultConsumer {
  private static final String AFTER_HANDLER = "AFTER_HANDLER:halt:";

  public static void main(String[] args) {
    Map<String, String> spec = new HashMap<>();
    for (String arg : args) {
      int eq = arg.indexOf('=');
      spec.put(arg.substring(0, eq), arg.substring(eq + 1));
    }
    String fault = spec.getOrDefault("fault", "");
    int haltAfterEffect = 0;
    if (fault.startsWith(AFTER_HANDLER)) {
      haltAfterEffect = Integer.parseInt(fault.substring(AFTER_HANDLER.length()));
    } else {
      FaultConsumer.installFault(fault);
    }
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
    properties.put("spring.datasource.url", spec.get("dedupJdbc"));
    properties.put("consumer-dedup.lease", spec.getOrDefault("leaseMs", "3000") + "ms");
    properties.put("consumer-dedup.hold.max-backoff", "1s");
    properties.put("faults.name", spec.get("name"));
    properties.put("faults.topic", spec.get("topic"));
    properties.put("faults.effects-jdbc", spec.get("effectsJdbc"));
    properties.put("faults.handler-ms", spec.getOrDefault("handlerMs", "2"));
    properties.put("faults.halt-after-effect", haltAfterEffect);
    SpringApplication application = new SpringApplication(SpringFaultConsumer.class);
    application.setDefaultProperties(properties);
    application.run();
    FaultConsumer.announce("STARTED");
  }

  @Bean
  Orders orders(
      @Value("${faults.name}") String name,
      @Value("${faults.effects-jdbc}") String effectsJdbc,
      @Value("${faults.handler-ms}") long handlerMillis,
      @Value("${faults.halt-after-effect}") int haltAfterEffect) {
    // Not a bean: the application's one DataSource stays the auto-configured dedup one.
    JdbcTemplate effects = new JdbcTemplate(new SingleConnectionDataSource(effectsJdbc, true));
    return new Orders(name, effects, handlerMillis, haltAfterEffect);
  }

  /** The listener: its effect is a row of {@code effects}, applied once per order number. */
  static class Orders {
    private final String name;
    private final JdbcTemplate effects;
    private final long handlerMillis;
    private final int haltAfterEffect;
    private final AtomicInteger applied = new AtomicInteger();

    Orders(String name, JdbcTemplate effects, long handlerMillis, int haltAfterEffect) {
      this.name = name;
      this.effects = effects;
      this.handlerMillis = handlerMillis;
      this.haltAfterEffect = haltAfterEffect;
    }

    @Idempotent(bizType = FaultConsumer.BIZ_TYPE, header = FaultConsumer.KEY_HEADER)
    @KafkaListener(topics = "${faults.topic}")
    void apply(String payload, @Header(FaultConsumer.KEY_HEADER) String orderNo)
        throws InterruptedException {
      if (handlerMillis > 0) {
        Thread.sleep(handlerMillis);
      }
      effects.update("INSERT INTO effects (biz_key, consumer) VALUES (?, ?)", orderNo, name);
      int count = applied.incrementAndGet();
      if (count == 1) {
        FaultConsumer.announce("APPLIED");
      }
      if (count == haltAfterEffect) {
        FaultConsumer.announce("FAULT AFTER_HANDLER halt");
        Runtime.getRuntime().halt(137);
      }
    }
  }
}
