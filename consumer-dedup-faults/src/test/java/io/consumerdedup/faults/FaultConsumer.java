package io.consumerdedup.faults;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.internal.FaultPoints;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.TransactionBoundDataSource;
import io.consumerdedup.kafka.DedupPollLoop;
import io.consumerdedup.kafka.DedupShareLoop;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.JdbcTransactionalProcessor;
import io.consumerdedup.kafka.KafkaDeadLetterPublisher;
import io.consumerdedup.kafka.KeyExtractors;
import io.consumerdedup.kafka.RecordProcessor;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.time.Duration;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Supplier;
import javax.sql.DataSource;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * One consumer of the suite, in a JVM of its own: {@link DedupPollLoop} with an {@link
 * IdempotentRecordHandler} (mode SEPARATE) or inside a {@link JdbcTransactionalProcessor} (mode
 * TRANSACTIONAL), dead-lettering to {@code <topic>-dlt} with {@link KafkaDeadLetterPublisher}.
 *
 * <p>The handler writes its effect as a row of {@code effects} (no unique key): in mode SEPARATE on
 * a connection of its own that does not go through the fault proxy, committed at once, so an effect
 * is never lost and a handler that runs twice leaves two rows; in mode TRANSACTIONAL on the
 * record's transaction. Keys starting with {@code poison-} always fail, keys starting with {@code
 * flaky-} fail on their first try (in any consumer, as {@code transient_failures} records). With
 * {@code slowMs=<millis>} the handler of a key starting with {@code slow-} takes that long; with
 * {@code recordRuns=true} each handler run is a row of {@code handler_runs} (key, consumer, the
 * record's delivery count, start and end in epoch milliseconds of the consumer's clock).
 *
 * <p>Arguments are {@code name=value} pairs; {@code fault=POINT:ACTION:N} makes the N-th arrival at
 * a {@link FaultPoints.Point} {@code halt} the JVM (a crash: no finally block, no commit, no
 * shutdown hook) or {@code stall<millis>} the thread that reached it (ended early by {@code resume}
 * on standard input); {@code fault=KEY:halt:<key>} halts it in the handler of that key (claimed,
 * its effect not applied); the action {@code error} throws an {@link OutOfMemoryError} on the
 * thread that reached the point. Keys starting with {@code error-} throw a {@link
 * StackOverflowError} from the handler on their first try; a loop ended by an Error is replaced by
 * a new one in the same JVM, as an application's supervisor would. With {@code share=true} the
 * consumer is a {@link DedupShareLoop} of the share group {@code group} instead. It prints {@code
 * FAULT <point>} right before the fault, and {@code APPLIED} after its first effect. It prints
 * {@code CLOCK <System.currentTimeMillis()>} first, so a test can tell its clock is the one it
 * meant to give it; with {@code gated=true} it waits for {@code go} on standard input before it
 * polls (a consumer started in advance joins the group the moment it is told).
 */
public final class FaultConsumer {
  static final String KEY_HEADER = "order-no";
  static final String BIZ_TYPE = "fault-order";
  private static final String KEY_FAULT = "KEY:halt:";

  /** Counted down by {@code resume} on standard input: ends a stall early ({@link #stall}). */
  static final CountDownLatch RESUME = new CountDownLatch(1);

  private FaultConsumer() {}

  public static void main(String[] args) throws Exception {
    announce("CLOCK " + System.currentTimeMillis());
    Map<String, String> spec = new HashMap<>();
    for (String arg : args) {
      int eq = arg.indexOf('=');
      spec.put(arg.substring(0, eq), arg.substring(eq + 1));
    }
    String name = spec.get("name");
    String topic = spec.get("topic");
    String group = spec.get("group");
    boolean transactional = "TRANSACTIONAL".equals(spec.get("mode"));
    boolean batched = Boolean.parseBoolean(spec.getOrDefault("batched", "true"));
    Duration lease = Duration.ofMillis(Long.parseLong(spec.getOrDefault("leaseMs", "3000")));
    long handlerMillis = Long.parseLong(spec.getOrDefault("handlerMs", "2"));
    long slowMillis = Long.parseLong(spec.getOrDefault("slowMs", "0"));
    boolean recordRuns = Boolean.parseBoolean(spec.get("recordRuns"));
    String fault = spec.getOrDefault("fault", "");
    String haltInHandlerOf =
        fault.startsWith(KEY_FAULT) ? fault.substring(KEY_FAULT.length()) : null;
    if (haltInHandlerOf == null) {
      installFault(fault);
    }
    CountDownLatch go = new CountDownLatch(Boolean.parseBoolean(spec.get("gated")) ? 1 : 0);

    HikariDataSource dedupPool = pool(spec.get("dedupJdbc"), name + "-dedup", 4);
    HikariDataSource effectsPool = pool(spec.get("effectsJdbc"), name + "-effects", 2);
    TransactionBoundDataSource transactions =
        transactional ? TransactionBoundDataSource.of(dedupPool) : null;
    DataSource storeSource = transactional ? transactions : dedupPool;
    IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(storeSource).build())
            .mode(transactional ? DedupMode.TRANSACTIONAL : DedupMode.SEPARATE)
            .lease(lease)
            .build();
    AtomicInteger applied = new AtomicInteger();
    IdempotentRecordHandler<String, String> handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(BIZ_TYPE)
            .key(KeyExtractors.header(KEY_HEADER))
            .groupId(group)
            .claimsPerPoll(batched)
            .fingerprint(FaultConsumer::fingerprint)
            .handler(
                record -> {
                  String key = keyOf(record);
                  if (key.equals(haltInHandlerOf)) {
                    announce("FAULT handler of " + key + " halt");
                    Runtime.getRuntime().halt(137);
                  }
                  String run = recordRuns ? runStarted(effectsPool, key, name, record) : null;
                  try {
                    if (handlerMillis > 0) {
                      Thread.sleep(handlerMillis);
                    }
                    if (slowMillis > 0 && key.startsWith("slow-")) {
                      Thread.sleep(slowMillis);
                    }
                    if (key.startsWith("poison-")) {
                      throw new IllegalStateException("poison record " + key + " always fails");
                    }
                    if (key.startsWith("flaky-") && firstFailure(effectsPool, key)) {
                      throw new IllegalStateException("transient failure of " + key);
                    }
                    if (key.startsWith("error-") && firstFailure(effectsPool, key)) {
                      announce("FAULT handler of " + key + " throws an Error");
                      throw new StackOverflowError("injected in the handler of " + key);
                    }
                    DataSource effects = transactional ? transactions : effectsPool;
                    writeEffect(effects, key, name);
                    if (applied.incrementAndGet() == 1) {
                      announce("APPLIED");
                    }
                  } finally {
                    if (run != null) {
                      runEnded(effectsPool, run);
                    }
                  }
                })
            .build();
    RecordProcessor<String, String> processor =
        transactional
            ? (batched
                ? JdbcTransactionalProcessor.of(transactions, handler)
                : JdbcTransactionalProcessor.perRecord(transactions, handler))
            : handler;

    Map<String, Object> producerConfig = new HashMap<>();
    producerConfig.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, spec.get("bootstrap"));
    producerConfig.put(ProducerConfig.ACKS_CONFIG, "all");
    producerConfig.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, 2_000_000);
    KafkaProducer<String, String> dlt =
        new KafkaProducer<>(producerConfig, new StringSerializer(), new StringSerializer());
    KafkaProducer<byte[], byte[]> rawDlt =
        new KafkaProducer<>(producerConfig, new ByteArraySerializer(), new ByteArraySerializer());

    Map<String, Object> consumerConfig = new HashMap<>();
    consumerConfig.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, spec.get("bootstrap"));
    consumerConfig.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    // Static membership: a consumer started in a killed one's place takes its partitions at once.
    consumerConfig.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, spec.getOrDefault("slot", name));
    consumerConfig.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
    consumerConfig.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    consumerConfig.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 6_000);
    consumerConfig.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 1_000);
    consumerConfig.put(
        ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG,
        Integer.parseInt(spec.getOrDefault("maxPollIntervalMs", "20000")));
    consumerConfig.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 50);
    consumerConfig.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    consumerConfig.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    // A share group's consumer takes only the settings below (no offsets, no static membership).
    Map<String, Object> shareConfig = new HashMap<>();
    for (String setting :
        List.of(
            ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG,
            ConsumerConfig.GROUP_ID_CONFIG,
            ConsumerConfig.MAX_POLL_RECORDS_CONFIG,
            ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG,
            ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG)) {
      shareConfig.put(setting, consumerConfig.get(setting));
    }
    boolean share = Boolean.parseBoolean(spec.get("share"));
    Supplier<Runnable> newLoop =
        () ->
            share
                ? DedupShareLoop.builder(shareConfig, List.of(topic), processor)
                    .deadLetterHandler(
                        KafkaDeadLetterPublisher.builder(dlt)
                            .rawProducer(rawDlt)
                            .groupId(group)
                            .build())
                    .maxAttempts(3)
                    .retryBackOff(Duration.ofMillis(200))
                    .holdBackOff(Duration.ofMillis(250), Duration.ofSeconds(1))
                    .build()
                : DedupPollLoop.builder(consumerConfig, List.of(topic), processor)
                    .deadLetterHandler(
                        KafkaDeadLetterPublisher.builder(dlt)
                            .rawProducer(rawDlt)
                            .groupId(group)
                            .build())
                    .maxAttempts(3)
                    .retryBackOff(Duration.ofMillis(200))
                    .holdBackOff(Duration.ofMillis(250), Duration.ofSeconds(1))
                    .build();
    AtomicReference<Runnable> loop = new AtomicReference<>(newLoop.get());
    announce("STARTED");
    Thread stopper =
        new Thread(
            () -> {
              try {
                // "stop" on standard input ends the loop cleanly (a bounce, not a crash).
                var in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in));
                String line;
                while ((line = in.readLine()) != null) {
                  if (line.equals("go")) {
                    go.countDown();
                  }
                  if (line.equals("resume")) {
                    RESUME.countDown();
                  }
                  if (line.equals("stop")) {
                    ((AutoCloseable) loop.get()).close();
                    executor.close();
                    announce("STOPPED");
                    Runtime.getRuntime().halt(0);
                  }
                }
              } catch (Exception e) {
                // The parent went away: the process is killed with it.
              }
            },
            "stdin-stop");
    stopper.setDaemon(true);
    stopper.start();
    go.await();
    // What an application's supervisor does: a loop that ended with an Error is replaced by a new
    // one on a new thread (as an ExecutorService would run it), on the same executor, in this JVM.
    while (true) {
      Runnable current = loop.get();
      AtomicReference<Error> ended = new AtomicReference<>();
      Thread pollThread =
          new Thread(
              () -> {
                try {
                  current.run();
                } catch (Error e) {
                  ended.set(e);
                }
              },
              "poll-loop");
      pollThread.start();
      pollThread.join();
      if (ended.get() == null) {
        // Stopped on request: the stopper closes the executor, says STOPPED and halts. Returning
        // now would end the JVM first, and the parent could not tell a clean stop.
        stopper.join();
        return;
      }
      announce("LOOP ENDED " + ended.get());
      loop.set(newLoop.get());
    }
  }

  /**
   * Blocks the calling thread for {@code millis}, or until {@code resume} arrives on standard
   * input: a test that sees what the stall was for has happened (a key taken over, a claim met)
   * ends it there instead of waiting the stall out.
   */
  static void stall(long millis) throws InterruptedException {
    RESUME.await(millis, TimeUnit.MILLISECONDS);
  }

  static void installFault(String fault) {
    if (fault == null || fault.isEmpty()) {
      return;
    }
    String[] parts = fault.split(":");
    FaultPoints.Point point = FaultPoints.Point.valueOf(parts[0]);
    String action = parts[1];
    int nth = Integer.parseInt(parts[2]);
    AtomicInteger arrivals = new AtomicInteger();
    FaultPoints.install(
        reached -> {
          if (reached != point || arrivals.incrementAndGet() != nth) {
            return;
          }
          announce("FAULT " + point + " " + action);
          if (action.equals("halt")) {
            Runtime.getRuntime().halt(137);
          } else if (action.equals("error")) {
            throw new OutOfMemoryError("injected at " + point);
          } else if (action.startsWith("stall")) {
            try {
              stall(Long.parseLong(action.substring("stall".length())));
            } catch (InterruptedException e) {
              Thread.currentThread().interrupt();
            }
            announce("RESUMED " + point);
          }
        });
  }

  static String keyOf(ConsumerRecord<String, String> record) {
    var header = record.headers().lastHeader(KEY_HEADER);
    return new String(header.value(), StandardCharsets.UTF_8);
  }

  static String fingerprint(ConsumerRecord<String, String> record) {
    try {
      byte[] value =
          record.value() == null ? new byte[0] : record.value().getBytes(StandardCharsets.UTF_8);
      return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(value));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  /** Whether this is the key's first failure, in any consumer: a transient failure fails once. */
  static boolean firstFailure(DataSource effects, String key) throws SQLException {
    try (Connection connection = effects.getConnection();
        PreparedStatement insert =
            connection.prepareStatement("INSERT INTO transient_failures (biz_key) VALUES (?)")) {
      insert.setString(1, key);
      return insert.executeUpdate() == 1;
    } catch (SQLException e) {
      // A key that failed before (integrity constraint violation, in both dialects).
      if (e.getSQLState() != null && e.getSQLState().startsWith("23")) {
        return false;
      }
      throw e;
    }
  }

  /**
   * Records the start of a handler run in {@code handler_runs} (committed at once, on the effects'
   * connection) and returns its id: with its end, a test sees whether two runs of one key
   * overlapped and how long each took.
   */
  static String runStarted(
      DataSource effects, String key, String consumer, ConsumerRecord<String, String> record)
      throws SQLException {
    String id = java.util.UUID.randomUUID().toString();
    try (Connection connection = effects.getConnection();
        PreparedStatement insert =
            connection.prepareStatement(
                "INSERT INTO handler_runs (run_id, biz_key, consumer, delivery, started_ms)"
                    + " VALUES (?, ?, ?, ?, ?)")) {
      insert.setString(1, id);
      insert.setString(2, key);
      insert.setString(3, consumer);
      insert.setInt(4, record.deliveryCount().map(Short::intValue).orElse(0));
      insert.setLong(5, System.currentTimeMillis());
      insert.executeUpdate();
    }
    return id;
  }

  /** Records the end of a handler run (returned or thrown). */
  static void runEnded(DataSource effects, String id) throws SQLException {
    try (Connection connection = effects.getConnection();
        PreparedStatement update =
            connection.prepareStatement("UPDATE handler_runs SET ended_ms = ? WHERE run_id = ?")) {
      update.setLong(1, System.currentTimeMillis());
      update.setString(2, id);
      update.executeUpdate();
    }
  }

  static void writeEffect(DataSource effects, String key, String consumer) throws SQLException {
    try (Connection connection = effects.getConnection();
        PreparedStatement insert =
            connection.prepareStatement("INSERT INTO effects (biz_key, consumer) VALUES (?, ?)")) {
      insert.setString(1, key);
      insert.setString(2, consumer);
      insert.executeUpdate();
    }
  }

  static synchronized void announce(String line) {
    System.out.println(line);
    System.out.flush();
  }

  private static HikariDataSource pool(String jdbcUrl, String name, int size) {
    // A few seconds, so an outage holds records instead of blocking the poll thread for 30 s.
    return pool(jdbcUrl, name, size, 3_000);
  }

  static HikariDataSource pool(
      String jdbcUrl, String name, int size, long connectionTimeoutMillis) {
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(jdbcUrl);
    config.setPoolName(name);
    config.setMaximumPoolSize(size);
    config.setConnectionTimeout(connectionTimeoutMillis);
    config.setInitializationFailTimeout(-1);
    // HikariCP reads the server's default isolation from its first connection; when the fault cuts
    // that read, it keeps -1 and every later connection fails to set up, so the pool never recovers
    // (HikariCP issue 1944). Naming each server's default keeps the pool out of that state.
    config.setTransactionIsolation(
        jdbcUrl.startsWith("jdbc:mariadb:")
            ? "TRANSACTION_REPEATABLE_READ"
            : "TRANSACTION_READ_COMMITTED");
    return new HikariDataSource(config);
  }
}
