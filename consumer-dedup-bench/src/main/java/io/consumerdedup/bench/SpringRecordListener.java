package io.consumerdedup.bench;

import io.consumerdedup.bench.SpringListenerApp.ListenerHooks;
import java.util.OptionalLong;
import org.springframework.context.ConfigurableApplicationContext;

/**
 * A Spring Boot record listener ({@link SpringListenerApp}): V7 with {@code @Idempotent} at the
 * defaults of Boot and of consumer-dedup-spring's auto-configuration, V8 the same listener in plain
 * spring-kafka ({@code consumer-dedup.enabled=false}, no annotation). Each run starts the
 * application in a fresh consumer group and closes it once every record is done; its start-up and
 * the group join fall outside the measured window, which starts at the first poll that returned
 * records, as for every variant.
 */
final class SpringRecordListener implements Variant {
  private final boolean dedup;

  private SpringRecordListener(boolean dedup) {
    this.dedup = dedup;
  }

  /** V7: {@code @Idempotent}, keyed by the {@code order-no} header. */
  static SpringRecordListener idempotent() {
    return new SpringRecordListener(true);
  }

  /** V8: the same listener without consumer-dedup. */
  static SpringRecordListener plain() {
    return new SpringRecordListener(false);
  }

  @Override
  public String id() {
    return dedup ? "V7" : "V8";
  }

  @Override
  public String title() {
    return dedup ? "Spring @Idempotent record listener" : "plain spring-kafka record listener";
  }

  @Override
  public HandlerRuns expectedHandlerRuns() {
    return dedup ? HandlerRuns.EACH_KEY_ONCE : HandlerRuns.EVERY_MESSAGE;
  }

  @Override
  public OptionalLong keysRecorded(BenchDatabase database) throws Exception {
    return dedup ? OptionalLong.of(DedupTable.workloadKeysDone(database)) : OptionalLong.empty();
  }

  @Override
  public void prepare(BenchDatabase database) throws Exception {
    if (dedup) {
      DedupTable.truncate(database);
    }
  }

  @Override
  public void consume(RunContext context) throws Exception {
    ListenerHooks hooks =
        new ListenerHooks(context.probe(), context.effects()::apply, recordsDone -> {});
    try (ConfigurableApplicationContext application =
        SpringListenerApp.start(
            dedup
                ? SpringListenerApp.IdempotentListener.class
                : SpringListenerApp.PlainListener.class,
            dedup,
            hooks,
            context.bootstrapServers(),
            context.jdbcUrl(),
            context.workload().topic(),
            context.groupId())) {
      context.awaitAllDone();
    }
  }
}
