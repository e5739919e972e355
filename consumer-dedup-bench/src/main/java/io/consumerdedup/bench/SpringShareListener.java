package io.consumerdedup.bench;

import io.consumerdedup.kafka.DeadLetterHandler;
import io.consumerdedup.spring.Idempotent;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.ShareConsumer;
import org.apache.kafka.common.serialization.Deserializer;
import org.jspecify.annotations.Nullable;
import org.springframework.boot.Banner;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.logging.LoggingSystem;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.DefaultShareConsumerFactory;
import org.springframework.kafka.core.ShareConsumerFactory;

/**
 * V11: a Spring Boot application whose {@code @Idempotent @KafkaListener} method, taking one
 * record, is served by a spring-kafka share container ({@code ShareKafkaListenerContainerFactory},
 * one consumer), at Boot's and consumer-dedup-spring's defaults: the share group of V9 and V10
 * consumed the way a Spring user writes it. consumer-dedup acknowledges each record (ACCEPT once
 * its SUCCESS is written), and the run counts a record done when its ACCEPT reaches the consumer,
 * the handler having run for it or not (a duplicate). The application's start-up and the group join
 * fall outside the measured window, which starts at the first poll that returned records.
 */
final class SpringShareListener implements Variant {
  private static final String TOPIC = "bench.topic";
  private static final String GROUP = "bench.group";

  @Override
  public String id() {
    return "V11";
  }

  @Override
  public String title() {
    return "Spring @Idempotent share listener";
  }

  @Override
  public HandlerRuns expectedHandlerRuns() {
    return HandlerRuns.EACH_KEY_ONCE;
  }

  @Override
  public OptionalLong keysRecorded(BenchDatabase database) throws Exception {
    return OptionalLong.of(DedupTable.workloadKeysDone(database));
  }

  @Override
  public void prepare(BenchDatabase database) throws Exception {
    DedupTable.truncate(database);
  }

  @Override
  public void consume(RunContext context) throws Exception {
    Map<String, Object> consumerConfig = context.shareConsumerConfig(); // the group at earliest
    Hooks hooks = new Hooks(context.probe(), context.effects()::apply, consumerConfig);
    if (System.getProperty(LoggingSystem.SYSTEM_PROPERTY) == null) {
      System.setProperty(LoggingSystem.SYSTEM_PROPERTY, LoggingSystem.NONE);
    }
    SpringApplication application = new SpringApplication(App.class);
    application.setWebApplicationType(WebApplicationType.NONE);
    application.setBannerMode(Banner.Mode.OFF);
    application.setLogStartupInfo(false);
    application.setRegisterShutdownHook(false);
    application.addInitializers(
        c -> c.getBeanFactory().registerSingleton("benchShareHooks", hooks));
    List<String> arguments = new ArrayList<>();
    arguments.add("--spring.kafka.bootstrap-servers=" + context.bootstrapServers());
    arguments.add("--spring.datasource.url=" + context.jdbcUrl());
    arguments.add("--spring.datasource.hikari.maximum-pool-size=" + RunContext.POOL_SIZE);
    arguments.add("--" + TOPIC + "=" + context.workload().topic());
    arguments.add("--" + GROUP + "=" + context.groupId());
    try (ConfigurableApplicationContext running =
        application.run(arguments.toArray(String[]::new))) {
      context.awaitAllDone();
    }
  }

  /**
   * What the application tells the probe: polls and ACCEPTs come on the container's consumer
   * thread, handler runs on consumer-dedup's worker thread; the probe, written by one thread at a
   * time, is told under its own lock.
   */
  static final class Hooks {
    private final Probe probe;
    private final java.util.function.Consumer<ConsumerRecord<String, String>> handler;
    private final Map<String, Object> consumerConfig;
    private final Set<String> handled = ConcurrentHashMap.newKeySet();

    Hooks(
        Probe probe,
        java.util.function.Consumer<ConsumerRecord<String, String>> handler,
        Map<String, Object> consumerConfig) {
      this.probe = probe;
      this.handler = handler;
      this.consumerConfig = consumerConfig;
    }

    void handle(ConsumerRecord<String, String> record) {
      handler.accept(record);
      handled.add(where(record));
    }

    void polled() {
      synchronized (probe) {
        probe.pollReturned();
      }
    }

    void accepted(ConsumerRecord<?, ?> record) {
      boolean ran = handled.remove(where(record));
      synchronized (probe) {
        probe.recordDone(ran);
      }
    }

    void deadLettered(Exception reason) {
      synchronized (probe) {
        probe.deadLettered(reason);
      }
    }

    private static String where(ConsumerRecord<?, ?> record) {
      return record.topic() + "-" + record.partition() + "@" + record.offset();
    }
  }

  @SpringBootConfiguration(proxyBeanMethods = false)
  @EnableAutoConfiguration
  static class App {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> benchShareFactory(Hooks benchShareHooks) {
      return new ShareKafkaListenerContainerFactory<>(
          new Measured<>(
              new DefaultShareConsumerFactory<String, String>(benchShareHooks.consumerConfig),
              benchShareHooks));
    }

    /** A record given up would be a failed run: the workload has none. */
    @Bean
    DeadLetterHandler<String, String> benchDeadLetters(Hooks benchShareHooks) {
      return (record, reason) -> benchShareHooks.deadLettered(reason);
    }

    @Bean
    Listener benchShareListener(Hooks benchShareHooks) {
      return new Listener(benchShareHooks);
    }
  }

  /** V11's listener: {@code @Idempotent}, keyed by the {@code order-no} header. */
  public static class Listener {
    private final Hooks hooks;

    public Listener(Hooks hooks) {
      this.hooks = hooks;
    }

    @Idempotent(bizType = DedupTable.BIZ_TYPE, header = Workload.ORDER_NO_HEADER)
    @KafkaListener(
        topics = "${" + TOPIC + "}",
        groupId = "${" + GROUP + "}",
        containerFactory = "benchShareFactory")
    public void handle(ConsumerRecord<String, String> record) {
      hooks.handle(record);
    }
  }

  /** Makes the consumers of {@code delegate}, each telling the hooks its polls and ACCEPTs. */
  private record Measured<K, V>(ShareConsumerFactory<K, V> delegate, Hooks hooks)
      implements ShareConsumerFactory<K, V> {
    @Override
    public ShareConsumer<K, V> createShareConsumer(
        @Nullable String groupId, @Nullable String clientId) {
      return measured(delegate.createShareConsumer(groupId, clientId));
    }

    @Override
    public ShareConsumer<K, V> createShareConsumer(
        @Nullable String groupId, @Nullable String clientId, Map<String, Object> overrides) {
      return measured(delegate.createShareConsumer(groupId, clientId, overrides));
    }

    @Override
    public Map<String, Object> getConfigurationProperties() {
      return delegate.getConfigurationProperties();
    }

    @Override
    public @Nullable Deserializer<K> getKeyDeserializer() {
      return delegate.getKeyDeserializer();
    }

    @Override
    public @Nullable Deserializer<V> getValueDeserializer() {
      return delegate.getValueDeserializer();
    }

    @SuppressWarnings("unchecked")
    private ShareConsumer<K, V> measured(ShareConsumer<K, V> consumer) {
      return (ShareConsumer<K, V>)
          Proxy.newProxyInstance(
              ShareConsumer.class.getClassLoader(),
              new Class<?>[] {ShareConsumer.class},
              (proxy, method, arguments) -> {
                Object result;
                try {
                  result = method.invoke(consumer, arguments);
                } catch (InvocationTargetException e) {
                  throw e.getCause();
                }
                if (method.getName().equals("poll")
                    && result instanceof ConsumerRecords<?, ?> records
                    && !records.isEmpty()) {
                  hooks.polled();
                } else if (method.getName().equals("acknowledge")
                    && arguments[0] instanceof ConsumerRecord<?, ?> record
                    && (arguments.length == 1 || arguments[1] == AcknowledgeType.ACCEPT)) {
                  hooks.accepted(record);
                }
                return result;
              });
    }
  }
}
