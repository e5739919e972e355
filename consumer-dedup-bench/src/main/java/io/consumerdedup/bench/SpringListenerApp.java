package io.consumerdedup.bench;

import io.consumerdedup.spring.Idempotent;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.List;
import java.util.function.LongConsumer;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.springframework.boot.Banner;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.DefaultKafkaConsumerFactoryCustomizer;
import org.springframework.boot.logging.LoggingSystem;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.listener.RecordInterceptor;

/**
 * The Spring Boot application of V7 and V8, as users write one: Boot's auto-configuration (and, for
 * V7, consumer-dedup-spring's), one {@code @KafkaListener} method taking one record, the
 * benchmark's trivial handler. Its settings are Boot's and consumer-dedup's defaults, except where
 * the benchmark needs its broker, its database and a fresh group: the consumer reads from the
 * earliest offset, and the defaults that make V7 and V8 comparable with the poll loops are spelled
 * out (500 records per poll, ack mode BATCH, so one {@code commitSync} per poll, one consumer
 * thread; the pool has {@link RunContext#POOL_SIZE} connections, as every variant's pool).
 *
 * <p>Two beans measure it without touching the listener's path: a consumer post-processor, Boot's
 * way of wrapping the consumers its factory makes, reports polls and commits to the probe as {@link
 * MeasuredConsumer} does for the poll loops; and a record interceptor, which the container calls
 * once it is done with a record (after the listener returned, so once V7's SUCCESS mark is queued
 * for its group, not yet written), tells the probe the record is done, also for a duplicate, whose
 * listener method never runs.
 */
@SpringBootConfiguration(proxyBeanMethods = false)
@EnableAutoConfiguration
class SpringListenerApp {
  private static final String TOPIC = "bench.topic";
  private static final String GROUP = "bench.group";

  /**
   * Starts the application with the listener {@code listener} ({@link IdempotentListener} or {@link
   * PlainListener}) on {@code topic} in the consumer group {@code groupId}, which starts consuming
   * at once; close it to stop.
   *
   * @param dedup whether consumer-dedup's auto-configuration is on ({@code consumer-dedup.enabled})
   */
  static ConfigurableApplicationContext start(
      Class<?> listener,
      boolean dedup,
      ListenerHooks hooks,
      String bootstrapServers,
      String jdbcUrl,
      String topic,
      String groupId) {
    // Boot would otherwise replace the benchmark's logging set-up (warnings, to standard error)
    // with its own console defaults, on standard output, where the report goes.
    if (System.getProperty(LoggingSystem.SYSTEM_PROPERTY) == null) {
      System.setProperty(LoggingSystem.SYSTEM_PROPERTY, LoggingSystem.NONE);
    }
    SpringApplication application = new SpringApplication(SpringListenerApp.class, listener);
    application.setWebApplicationType(WebApplicationType.NONE);
    application.setBannerMode(Banner.Mode.OFF);
    application.setLogStartupInfo(false);
    application.setRegisterShutdownHook(false);
    application.addInitializers(
        context -> context.getBeanFactory().registerSingleton("benchListenerHooks", hooks));
    List<String> arguments = new ArrayList<>();
    arguments.add("--spring.kafka.bootstrap-servers=" + bootstrapServers);
    arguments.add("--spring.kafka.consumer.auto-offset-reset=earliest");
    arguments.add(
        "--spring.kafka.consumer.max-poll-records=" + ConsumerConfig.DEFAULT_MAX_POLL_RECORDS);
    arguments.add("--spring.kafka.listener.ack-mode=batch");
    arguments.add("--spring.kafka.listener.concurrency=1");
    arguments.add("--spring.datasource.url=" + jdbcUrl);
    arguments.add("--spring.datasource.hikari.maximum-pool-size=" + RunContext.POOL_SIZE);
    arguments.add("--consumer-dedup.enabled=" + dedup);
    arguments.add("--" + TOPIC + "=" + topic);
    arguments.add("--" + GROUP + "=" + groupId);
    return application.run(arguments.toArray(String[]::new));
  }

  /**
   * Tells the probe when the container is done with each record, or when a listener call failed.
   */
  @Bean
  RecordInterceptor<Object, Object> benchProbeInterceptor(ListenerHooks benchListenerHooks) {
    return new RecordInterceptor<>() {
      @Override
      public ConsumerRecord<Object, Object> intercept(
          ConsumerRecord<Object, Object> record, Consumer<Object, Object> consumer) {
        return record;
      }

      @Override
      public void success(
          ConsumerRecord<Object, Object> record, Consumer<Object, Object> consumer) {
        benchListenerHooks.done();
      }

      @Override
      public void failure(
          ConsumerRecord<Object, Object> record,
          Exception exception,
          Consumer<Object, Object> consumer) {
        benchListenerHooks.failed(exception);
      }
    };
  }

  /** Wraps each consumer Boot's factory makes so that its polls and commits reach the probe. */
  @Bean
  DefaultKafkaConsumerFactoryCustomizer benchMeasuredConsumers(ListenerHooks benchListenerHooks) {
    return factory -> measure(factory, benchListenerHooks.probe());
  }

  private static <K, V> void measure(DefaultKafkaConsumerFactory<K, V> factory, Probe probe) {
    factory.addPostProcessor(consumer -> measured(consumer, probe));
  }

  @SuppressWarnings("unchecked")
  private static <K, V> Consumer<K, V> measured(Consumer<K, V> consumer, Probe probe) {
    return (Consumer<K, V>)
        Proxy.newProxyInstance(
            Consumer.class.getClassLoader(),
            new Class<?>[] {Consumer.class},
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
                probe.pollReturned();
              } else if (method.getName().equals("commitSync")) {
                probe.commitSynced();
              }
              return result;
            });
  }

  /** V7's listener: {@code @Idempotent}, keyed by the {@code order-no} header. */
  public static class IdempotentListener {
    private final ListenerHooks hooks;

    public IdempotentListener(ListenerHooks benchListenerHooks) {
      this.hooks = benchListenerHooks;
    }

    @Idempotent(bizType = DedupTable.BIZ_TYPE, header = Workload.ORDER_NO_HEADER)
    @KafkaListener(topics = "${" + TOPIC + "}", groupId = "${" + GROUP + "}")
    public void handle(ConsumerRecord<String, String> record) {
      hooks.handle(record);
    }
  }

  /** V8's listener: the same method without {@code @Idempotent}. */
  public static class PlainListener {
    private final ListenerHooks hooks;

    public PlainListener(ListenerHooks benchListenerHooks) {
      this.hooks = benchListenerHooks;
    }

    @KafkaListener(topics = "${" + TOPIC + "}", groupId = "${" + GROUP + "}")
    public void handle(ConsumerRecord<String, String> record) {
      hooks.handle(record);
    }
  }

  /**
   * What the application's listener and interceptor tell the benchmark, for one run: the handler to
   * run, and the probe to tell when each record is done (whether its handler ran). Used by the
   * container's one consumer thread only.
   */
  static final class ListenerHooks {
    private final Probe probe;
    private final java.util.function.Consumer<ConsumerRecord<String, String>> handler;
    private final LongConsumer afterEachDone;
    private boolean handlerRan;

    /**
     * @param afterEachDone called after each record done, with the number of records done so far
     */
    ListenerHooks(
        Probe probe,
        java.util.function.Consumer<ConsumerRecord<String, String>> handler,
        LongConsumer afterEachDone) {
      this.probe = probe;
      this.handler = handler;
      this.afterEachDone = afterEachDone;
    }

    Probe probe() {
      return probe;
    }

    void handle(ConsumerRecord<String, String> record) {
      handler.accept(record);
      handlerRan = true;
    }

    void done() {
      boolean ran = handlerRan;
      handlerRan = false;
      probe.recordDone(ran);
      afterEachDone.accept(probe.done());
    }

    /** A listener call failed: the run has failed (no record of the workload should). */
    void failed(Exception exception) {
      handlerRan = false;
      probe.deadLettered(exception);
    }
  }
}
