package io.consumerdedup.examples.scenario;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.examples.DemoContext;
import io.consumerdedup.examples.DemoSettings;
import io.consumerdedup.examples.Progress;
import io.consumerdedup.examples.infra.DemoSchema;
import io.consumerdedup.examples.kafka.ConsumerLoop;
import io.consumerdedup.examples.kafka.ConsumerSetup;
import io.consumerdedup.examples.kafka.DedupConsumer;
import io.consumerdedup.examples.kafka.Events;
import io.consumerdedup.examples.kafka.ScenarioConsumer;
import io.consumerdedup.examples.ledger.EffectKind;
import io.consumerdedup.examples.ledger.Ledger;
import io.consumerdedup.examples.report.RunRow;
import io.consumerdedup.examples.report.RunStats;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.KafkaDeadLetterPublisher;
import io.consumerdedup.kafka.KeyExtractors;
import io.consumerdedup.kafka.RecordHandler;
import io.consumerdedup.kafka.RecordProcessor;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;
import java.util.function.UnaryOperator;
import javax.sql.DataSource;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;

/**
 * One run of a scenario (without or with dedup), on its own topic, consumer groups and database
 * schema, so that no run sees another's records, offsets or rows.
 */
final class ScenarioRun implements AutoCloseable {
  private final DemoContext context;
  private final String runId;
  private final String topic;
  private final DemoSchema schema;
  private final Ledger ledger;
  private final RunStats stats = new RunStats();
  private final Events events;
  private final Progress progress;
  private final List<AutoCloseable> resources = new ArrayList<>();

  private ScenarioRun(DemoContext context, String runId, DemoSchema schema, Progress progress) {
    this.context = context;
    this.runId = runId;
    this.topic = "payments-" + runId;
    this.schema = schema;
    this.ledger = new Ledger(schema.dataSource());
    this.events = new Events(context.bootstrapServers());
    this.progress = progress;
  }

  /** Creates the run's schema and topic; {@code mode} is {@code without} or {@code with}. */
  static ScenarioRun start(DemoContext context, String scenarioId, String mode) throws Exception {
    String runId =
        (scenarioId + "_" + mode + "_" + UUID.randomUUID().toString().substring(0, 6))
            .replace('-', '_');
    DemoSchema schema = DemoSchema.create(context.jdbcUrl(), "demo_" + runId);
    ScenarioRun run =
        new ScenarioRun(
            context, runId, schema, context.progress().scoped(scenarioId + ", " + mode + " dedup"));
    try {
      run.createTopic();
    } catch (Exception e) {
      run.close();
      throw e;
    }
    return run;
  }

  private void createTopic() throws Exception {
    try (Admin admin =
        Admin.create(
            Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, context.bootstrapServers()))) {
      admin
          .createTopics(
              List.of(
                  new NewTopic(topic, Optional.of(1), Optional.empty()),
                  new NewTopic(
                      topic + KafkaDeadLetterPublisher.DEFAULT_TOPIC_SUFFIX,
                      Optional.of(1),
                      Optional.empty())))
          .all()
          .get();
    }
  }

  String topic() {
    return topic;
  }

  /** The consumer group of {@code service} in this run. */
  String group(String service) {
    return service + "-" + runId;
  }

  DataSource dataSource() {
    return schema.dataSource();
  }

  /** A JDBC URL on this run's schema, for a child JVM. */
  String jdbcUrl() {
    return schema.url();
  }

  Ledger ledger() {
    return ledger;
  }

  RunStats stats() {
    return stats;
  }

  Events events() {
    return events;
  }

  Progress progress() {
    return progress;
  }

  DemoSettings settings() {
    return context.settings();
  }

  String bootstrapServers() {
    return context.bootstrapServers();
  }

  /**
   * An executor over this run's dedup table with the demo's short lease, closed with the run;
   * {@code customizer} may change any setting.
   */
  IdempotentExecutor executor(UnaryOperator<IdempotentExecutor.Builder> customizer) {
    JdbcDedupStore store = JdbcDedupStore.builder(schema.dataSource()).build();
    IdempotentExecutor executor =
        customizer.apply(IdempotentExecutor.builder(store).lease(settings().lease())).build();
    resources.add(executor);
    return executor;
  }

  /** Publishes an event with its business key in header {@code keyHeader}; returns its offset. */
  long send(String keyHeader, String key, String value) throws InterruptedException {
    long offset = events.send(topic, keyHeader, key, value);
    progress.step("sent " + topic + "@" + offset + " [" + keyHeader + "=" + key + "] " + value);
    return offset;
  }

  static String mode(boolean withDedup) {
    return withDedup ? "with" : "without";
  }

  static String label(boolean withDedup) {
    return withDedup ? "with dedup" : "without dedup";
  }

  /** A consumer named {@code name} in {@code service}'s group on this run's topic. */
  ConsumerSetup.Builder setup(String name, String service) {
    return ConsumerSetup.builder(bootstrapServers(), topic, group(service))
        .name(name)
        .stats(stats)
        .progress(progress)
        .retryBackoff(settings().retryBackoff());
  }

  /**
   * The consumer code as it is on the naive loop ({@code withDedup} false), or behind an {@link
   * IdempotentRecordHandler} keyed by header {@code keyHeader} under {@code bizType}, on the
   * library's loop; closed with the run.
   */
  ScenarioConsumer consumer(
      ConsumerSetup setup,
      boolean withDedup,
      String bizType,
      String keyHeader,
      RecordHandler<String, String> handler) {
    return consumer(setup, withDedup, bizType, keyHeader, handler, UnaryOperator.identity());
  }

  /** The same, with {@code executorSettings} applied to the dedup executor. */
  ScenarioConsumer consumer(
      ConsumerSetup setup,
      boolean withDedup,
      String bizType,
      String keyHeader,
      RecordHandler<String, String> handler,
      UnaryOperator<IdempotentExecutor.Builder> executorSettings) {
    if (!withDedup) {
      return withoutDedup(setup, handler);
    }
    return withDedup(
        setup,
        idempotent(executor(executorSettings), setup.groupId(), bizType, keyHeader, handler));
  }

  /** The naive loop running {@code handler} as it is, closed with the run. */
  ScenarioConsumer withoutDedup(ConsumerSetup setup, RecordHandler<String, String> handler) {
    return closedWithRun(new ConsumerLoop(setup, handler));
  }

  /** The library's loop running {@code processor}, closed with the run. */
  ScenarioConsumer withDedup(ConsumerSetup setup, RecordProcessor<String, String> processor) {
    return closedWithRun(new DedupConsumer(setup, processor));
  }

  private ScenarioConsumer closedWithRun(ScenarioConsumer consumer) {
    resources.add(consumer);
    return consumer;
  }

  /** {@code handler} applied once per value of header {@code keyHeader}, under {@code bizType}. */
  static IdempotentRecordHandler<String, String> idempotent(
      IdempotentExecutor executor,
      String group,
      String bizType,
      String keyHeader,
      RecordHandler<String, String> handler) {
    return IdempotentRecordHandler.<String, String>builder(executor)
        .bizType(bizType)
        .key(KeyExtractors.header(keyHeader))
        .groupId(group)
        .handler(handler)
        .build();
  }

  /** The report line of this run, read back from the ledger. */
  RunRow row(String label, boolean withDedup, EffectKind kind, int distinctActions)
      throws Exception {
    return row(label, withDedup, kind, stats, distinctActions);
  }

  RunRow row(String label, boolean withDedup, EffectKind kind, RunStats stats, int distinctActions)
      throws Exception {
    return RunRow.of(
        label,
        withDedup,
        kind,
        stats,
        ledger.entries(kind),
        ledger.actionsApplied(kind),
        ledger.balance(kind),
        distinctActions);
  }

  @Override
  public void close() throws Exception {
    Exception failure = new Exception("Could not clean up run " + runId);
    for (int i = resources.size() - 1; i >= 0; i--) {
      closeInto(resources.get(i), failure);
    }
    closeInto(events, failure);
    closeInto(schema, failure);
    if (failure.getSuppressed().length > 0) {
      throw failure;
    }
  }

  private static void closeInto(AutoCloseable resource, Exception failure) {
    try {
      resource.close();
    } catch (Exception e) {
      failure.addSuppressed(e);
    }
  }
}
