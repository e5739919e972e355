package io.consumerdedup.faults;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.kafka.KafkaDeadLetterPublisher;
import io.consumerdedup.testing.ChildJvm;
import io.consumerdedup.testing.TcpProxy;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.jspecify.annotations.Nullable;
import org.springframework.kafka.support.KafkaHeaders;

/**
 * One run of the suite: its own schema (the dedup table and an {@code effects} table without a
 * unique key), its own topic and dead-letter topic, the records it produced, the consumers it
 * started (child JVMs of {@link FaultConsumer}) and the faults it injected. {@link #verify()}
 * checks the invariants on the recorded history once the run is done.
 *
 * <ul>
 *   <li>I1: every produced record's key is SUCCESS, or the record is on the dead-letter topic with
 *       the reason in a header (nothing lost);
 *   <li>I2: one effect per SUCCESS key; in mode SEPARATE the extra effects of a key are at most the
 *       records of that key caught in the window by a kill (applied, SUCCESS not written, measured
 *       right after each kill), in mode TRANSACTIONAL none;
 *   <li>I3: no PROCESSING row whose lease has passed;
 *   <li>I4: the group's committed offsets equal the log end offsets; and while the run went on, no
 *       offset was committed past a record that was neither SUCCESS, FAILED nor dead-lettered (not
 *       for a share group, which commits no offsets);
 *   <li>I5: after the last fault, the consumers were done within lease + session timeout + slack (a
 *       share group's session timeout, 45 s, for a share group).
 * </ul>
 */
final class FaultRun implements AutoCloseable {
  static final int PARTITIONS = 2;
  static final Duration SESSION_TIMEOUT = Duration.ofSeconds(6);
  static final Duration SLACK = Duration.ofSeconds(15);

  /** A statement sent right before a consumer's crash may still commit on the server meanwhile. */
  private static final Executor AFTER_LAST_STATEMENTS =
      CompletableFuture.delayedExecutor(300, TimeUnit.MILLISECONDS);

  /** {@code group.share.session.timeout.ms}, the broker's default and floor. */
  static final Duration SHARE_SESSION_TIMEOUT = Duration.ofSeconds(45);

  /**
   * The suffix of the dead-letter topic both kinds of consumer write to: {@link
   * KafkaDeadLetterPublisher}'s default, the name spring-kafka's {@code
   * DeadLetterPublishingRecoverer} gives it.
   */
  static final String DLT_SUFFIX = KafkaDeadLetterPublisher.DEFAULT_TOPIC_SUFFIX;

  /** A produced record and where it landed. */
  record Produced(String key, String value, int partition, long offset, boolean hasKey) {}

  final String name;
  final FaultDatabase database;
  final String mode;
  final boolean batched;
  final Duration lease;
  final String schema;
  final String topic;
  final String group;
  final List<Produced> produced = new ArrayList<>();
  final List<ChildJvm> consumers = new ArrayList<>();
  private final Map<ChildJvm, String> names = new HashMap<>();
  private final Map<ChildJvm, String> faults = new HashMap<>();

  /**
   * Each consumer's window (see {@link #crashed}), measured as it exits rather than when the
   * scenario gets to it: a soak notices a consumer that halted on its own seconds later, when its
   * keys may have been taken over and marked SUCCESS by another, which applied them a second time.
   * Measured then, such a window once counted nothing, and the soak failed on a duplicate the kill
   * had made.
   */
  private final Map<ChildJvm, CompletableFuture<List<String>>> windowsAtExit =
      new ConcurrentHashMap<>();

  /**
   * The keys of the records caught in the windows, once per effect: a duplicate is explained only
   * by a window of its own key. Compared in total, a key applied twice with no kill to explain it
   * passed when another key's window was counted but never applied again (its SUCCESS landed after
   * the window was measured).
   */
  private final Map<String, Integer> windowKeys = new ConcurrentHashMap<>();

  final List<String> notes = new CopyOnWriteArrayList<>();
  private final List<String> violations = new CopyOnWriteArrayList<>();
  private final AtomicInteger consumerNumbers = new AtomicInteger();
  private final Map<String, String> extraArgs = new HashMap<>();

  /** The child JVMs' main class: it takes the arguments {@link FaultConsumer} documents. */
  final Class<?> consumerMain;

  private TcpProxy proxy;
  private final List<TcpProxy> extraProxies = new ArrayList<>();
  private Thread offsetWatcher;
  private Admin admin;
  private boolean share;
  private volatile boolean watching;
  private boolean effectsInTable = true;
  int window;
  int kills;
  long lastFaultEndNanos;
  long recoveryMillis = -1;
  private final long startNanos = System.nanoTime();

  FaultRun(Target target, String name, String mode, boolean batched, Duration lease) {
    this.name = name;
    this.database = target.database;
    this.consumerMain = target.consumerMain;
    this.mode = mode;
    this.batched = batched;
    this.lease = lease;
    this.schema = database.create("faults");
    String id = UUID.randomUUID().toString().substring(0, 8);
    this.topic = "faults-" + name.replaceAll("[^A-Za-z0-9]", "-") + "-" + id;
    this.group = "faults-group-" + id;
    TestKafka.createTopics(PARTITIONS, topic);
    TestKafka.createTopics(1, topic + DLT_SUFFIX);
    database.auxiliaryTables().forEach(this::execute);
  }

  boolean transactional() {
    return mode.equals("TRANSACTIONAL");
  }

  /** The consumers' dedup connections go through this proxy from now on. */
  TcpProxy proxy() {
    if (proxy == null) {
      proxy = database.newProxy();
    }
    return proxy;
  }

  /** Another proxy to the database, for one consumer alone; closed with the run. */
  TcpProxy newProxy() {
    TcpProxy extra = database.newProxy();
    extraProxies.add(extra);
    return extra;
  }

  void consumerArg(String key, String value) {
    extraArgs.put(key, value);
    if (key.equals("output")) {
      // The effect is a receipt on that topic, not a row of effects: the scenario counts those.
      effectsInTable = false;
    }
  }

  /**
   * Makes the run's group a share group (KIP-932) with acquisition locks of {@code lock}, starting
   * at the earliest record, and its consumers {@code DedupShareLoop}s: done once every record's key
   * is settled, as a share group commits no offsets. Its members heartbeat every half second, not
   * every 5 s (the broker's default): a consumer started is given its partitions on its next
   * heartbeat, and each scenario starts up to three. The session timeout, after which a killed
   * member's partitions go to the others, stays the broker's.
   */
  void shareGroup(Duration lock) {
    TestShareGroups.configure(group, lock, Duration.ofMillis(500));
    consumerArg("share", "true");
    share = true;
  }

  // ---- producing

  void produce(int count, String prefix) {
    List<String> keys = new ArrayList<>();
    for (int i = 0; i < count; i++) {
      keys.add(prefix + i);
    }
    produceKeys(keys);
  }

  /** Produces a record per key, in order, its value "payload of" the key. */
  void produceKeys(List<String> keys) {
    List<String[]> records = new ArrayList<>();
    for (String key : keys) {
      records.add(new String[] {key, "payload of " + key});
    }
    produceAll(records);
  }

  /**
   * Produces {key, value} pairs in order, keyed by the order number so a key keeps its partition.
   */
  void produceAll(List<String[]> keysAndValues) {
    produceAllTo(null, keysAndValues);
  }

  /**
   * As {@link #produceAll}, every record to {@code partition} if not null: one key on several
   * partitions, so several consumers of the group get it at once.
   */
  void produceAllTo(@Nullable Integer partition, List<String[]> keysAndValues) {
    try (KafkaProducer<String, String> producer = TestKafka.producer()) {
      List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
      for (String[] kv : keysAndValues) {
        ProducerRecord<String, String> record =
            new ProducerRecord<>(topic, partition, kv[0], kv[1]);
        record.headers().add(FaultConsumer.KEY_HEADER, kv[0].getBytes(StandardCharsets.UTF_8));
        sent.add(producer.send(record));
      }
      for (int i = 0; i < sent.size(); i++) {
        RecordMetadata metadata = sent.get(i).get();
        String[] kv = keysAndValues.get(i);
        produced.add(new Produced(kv[0], kv[1], metadata.partition(), metadata.offset(), true));
      }
    } catch (Exception e) {
      throw new IllegalStateException("Could not produce to " + topic, e);
    }
  }

  /** Produces a record as given (bad input); {@code key} is what a user would call its key. */
  void produceRaw(String label, byte[] recordKey, byte[] value, List<Header> headers) {
    try (KafkaProducer<byte[], byte[]> producer = rawProducer()) {
      ProducerRecord<byte[], byte[]> record =
          new ProducerRecord<>(topic, 0, recordKey, value, new ArrayList<>(headers));
      RecordMetadata metadata = producer.send(record).get();
      Header last = null;
      for (Header header : headers) {
        if (header.key().equals(FaultConsumer.KEY_HEADER)) {
          last = header;
        }
      }
      produced.add(
          new Produced(
              last == null ? label : new String(last.value(), StandardCharsets.UTF_8),
              label,
              metadata.partition(),
              metadata.offset(),
              false));
    } catch (Exception e) {
      throw new IllegalStateException("Could not produce " + label, e);
    }
  }

  static Header keyHeader(byte[] value) {
    return new RecordHeader(FaultConsumer.KEY_HEADER, value);
  }

  private static KafkaProducer<byte[], byte[]> rawProducer() {
    Map<String, Object> config = new HashMap<>();
    config.put(
        org.apache.kafka.clients.producer.ProducerConfig.BOOTSTRAP_SERVERS_CONFIG,
        TestKafka.bootstrapServers());
    config.put(org.apache.kafka.clients.producer.ProducerConfig.ACKS_CONFIG, "all");
    config.put(org.apache.kafka.clients.producer.ProducerConfig.MAX_REQUEST_SIZE_CONFIG, 2_000_000);
    return new KafkaProducer<>(
        config,
        new org.apache.kafka.common.serialization.ByteArraySerializer(),
        new org.apache.kafka.common.serialization.ByteArraySerializer());
  }

  // ---- consumers

  /** Starts a consumer in {@code slot} (its static group membership), optionally with a fault. */
  ChildJvm start(String slot, String fault) {
    return start(slot, fault, proxy);
  }

  /** As {@link #start(String, String)}, its dedup connections through {@code via} (or direct). */
  ChildJvm start(String slot, String fault, TcpProxy via) {
    return start(slot, fault, via, Map.of());
  }

  /**
   * As {@link #start(String, String, TcpProxy)}, its JVM's environment extended (a shifted clock).
   */
  ChildJvm start(String slot, String fault, TcpProxy via, Map<String, String> environment) {
    String consumer = slot + "-" + consumerNumbers.incrementAndGet();
    List<String> args = new ArrayList<>();
    args.add("name=" + consumer);
    args.add("slot=" + group + "-" + slot);
    args.add("topic=" + topic);
    args.add("group=" + group);
    args.add("bootstrap=" + TestKafka.bootstrapServers());
    args.add("dedupJdbc=" + database.dedupUrl(schema, via));
    args.add("effectsJdbc=" + database.url(schema));
    args.add("mode=" + mode);
    args.add("batched=" + batched);
    args.add("leaseMs=" + lease.toMillis());
    if (fault != null) {
      args.add("fault=" + fault);
    }
    extraArgs.forEach((k, v) -> args.add(k + "=" + v));
    try {
      ChildJvm child = ChildJvm.start(environment, consumerMain, args.toArray(String[]::new));
      consumers.add(child);
      names.put(child, consumer);
      windowsAtExit.put(
          child,
          child
              .exited()
              .thenApplyAsync(exited -> appliedWithoutSuccess(consumer), AFTER_LAST_STATEMENTS));
      if (fault != null) {
        faults.put(child, fault);
      }
      return child;
    } catch (java.io.IOException e) {
      throw new IllegalStateException(e);
    }
  }

  /**
   * Waits for a consumer to crash at its fault point, checks that the fault happened, and measures
   * the records it applied without their SUCCESS (the window).
   */
  void awaitCrash(ChildJvm child, Duration timeout) throws InterruptedException {
    int code = child.awaitExit(timeout);
    String output = child.output();
    if (!haltedAtFaultPoint(code, output)) {
      throw new AssertionError(
          "The consumer did not halt at its fault point (exit code " + code + "):\n" + output);
    }
    crashed(child);
  }

  /**
   * Whether a consumer that exited with {@code code} was halted at its fault point: it said it
   * would halt there, and the JVM ended as a halt (or a SIGKILL) ends it. A consumer that reached
   * its fault point and ended otherwise (an Error it survived, then a clean stop; a crash of its
   * own) crashed nowhere the run chose, and counting it as a kill would hide that.
   */
  static boolean haltedAtFaultPoint(int code, String output) {
    return code == HALT_EXIT_CODE
        && output.lines().anyMatch(line -> line.startsWith("FAULT ") && line.endsWith(" halt"));
  }

  /** The exit code of {@code Runtime.halt(137)} at a fault point, and of a SIGKILL (128 + 9). */
  static final int HALT_EXIT_CODE = 137;

  /**
   * Kills a consumer (SIGKILL) while the group still has records to finish, and measures its
   * window. A kill once every record is committed interrupts nothing: the scenario would pass
   * without its fault, so that is a violation. One already gone is not killed: see {@link #halted}.
   */
  void kill(ChildJvm child) throws InterruptedException {
    if (!child.isAlive()) {
      halted(child);
      return;
    }
    boolean idle = allCommitted();
    child.kill();
    if (idle) {
      violations.add(
          "a consumer was killed after the group had committed every record: the kill interrupted"
              + " nothing");
    }
    crashed(child);
  }

  /** As {@link #kill}, wherever the group is (a soak kills at random moments, idle ones too). */
  void killAnyTime(ChildJvm child) throws InterruptedException {
    if (!child.isAlive()) {
      // Not killed: it halted at its fault point meanwhile, or it died on its own, which a kill
      // counted here would hide.
      halted(child);
      return;
    }
    child.kill();
    crashed(child);
  }

  /**
   * Records a consumer that halted at its fault point on its own, seen after the fact. One that
   * died without reaching a fault point is not a fault the run injected but a consumer that
   * crashed: counting it as a kill and replacing it would hide that.
   */
  void halted(ChildJvm child) throws InterruptedException {
    int code = child.awaitExit(Duration.ofSeconds(10)); // its last lines read
    if (!haltedAtFaultPoint(code, child.output())) {
      violations.add(
          names.get(child)
              + " died without halting at a fault point (exit code "
              + code
              + "); its output:\n"
              + DatabaseFaultsTest.tail(child.output()));
    }
    crashed(child);
  }

  /**
   * Counts the records {@code child} (alive, but cut off from the database) applied without
   * SUCCESS: the window a zombie whose lease runs out leaves.
   */
  void measureWindowOf(ChildJvm child) {
    countWindow(appliedWithoutSuccess(names.get(child)));
  }

  private void countWindow(List<String> keys) {
    window += keys.size();
    keys.forEach(key -> windowKeys.merge(key, 1, Integer::sum));
  }

  private void crashed(ChildJvm child) throws InterruptedException {
    kills++;
    faultEnded();
    try {
      countWindow(windowsAtExit.get(child).get(30, TimeUnit.SECONDS));
    } catch (ExecutionException | TimeoutException e) {
      throw new IllegalStateException("The window of " + names.get(child) + " not measured", e);
    }
  }

  void faultEnded() {
    lastFaultEndNanos = System.nanoTime();
  }

  /** The keys of the effects of {@code consumer} (which is dead) whose key is not SUCCESS. */
  private List<String> appliedWithoutSuccess(String consumer) {
    List<String> keys = new ArrayList<>();
    try (Connection connection = database.connect(schema);
        PreparedStatement statement =
            connection.prepareStatement(
                "SELECT e.biz_key FROM effects e WHERE e.consumer = ? AND NOT EXISTS (SELECT 1"
                    + " FROM consumer_dedup d WHERE d.biz_key = e.biz_key"
                    + " AND d.status = 'SUCCESS')")) {
      statement.setString(1, consumer);
      try (ResultSet rs = statement.executeQuery()) {
        while (rs.next()) {
          keys.add(rs.getString(1));
        }
      }
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
    return keys;
  }

  /** Stops a consumer cleanly (it commits what is done), as a rolling restart does. */
  void stop(ChildJvm child) throws Exception {
    if (child.isAlive()) {
      try {
        child.send("stop");
        // Stopped, not crashed, even when it reached its fault point (an action it survived).
        if (child.awaitExit(Duration.ofSeconds(30)) == 0 && child.output().contains("STOPPED")) {
          return;
        }
      } catch (java.io.IOException e) {
        // It halted at its fault point meanwhile.
      }
    }
    halted(child);
  }

  /** The fault a consumer was started with, or null. */
  String faultOf(ChildJvm child) {
    return faults.get(child);
  }

  /**
   * The receipts per key on {@code topic} (partition 0), read at {@code isolation}: {@code
   * read_committed} counts only the outputs of committed Kafka transactions.
   */
  static Map<String, Long> receipts(String topic, String isolation) {
    Map<String, Object> config = TestKafka.consumerConfig("unused");
    config.remove(ConsumerConfig.GROUP_ID_CONFIG);
    config.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
    Map<String, Long> perKey = new HashMap<>();
    TopicPartition partition = new TopicPartition(topic, 0);
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(config)) {
      consumer.assign(List.of(partition));
      consumer.seekToBeginning(List.of(partition));
      // Under read_committed the end is the last stable offset: no open transaction is waited for.
      long end = consumer.endOffsets(List.of(partition)).get(partition);
      long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
      while (consumer.position(partition) < end && System.nanoTime() < deadline) {
        consumer.poll(Duration.ofMillis(200)).forEach(r -> perKey.merge(r.key(), 1L, Long::sum));
      }
    }
    return perKey;
  }

  // ---- waiting for the end

  /**
   * Watches the group's committed offsets while the run goes on: an offset committed past a record
   * whose key is neither SUCCESS nor FAILED (and not dead-lettered) is a violation of I4.
   */
  void watchOffsets() {
    watching = true;
    offsetWatcher =
        new Thread(
            () -> {
              while (watching) {
                try {
                  checkCommittedPastUnsettled();
                  Thread.sleep(250);
                } catch (InterruptedException e) {
                  return;
                } catch (RuntimeException e) {
                  // The broker or database briefly unreachable from here: look again.
                }
              }
            },
            "offset-watcher");
    offsetWatcher.setDaemon(true);
    offsetWatcher.start();
  }

  private void checkCommittedPastUnsettled() {
    Map<TopicPartition, Long> committed = committedOffsets();
    if (committed.isEmpty()) {
      return;
    }
    Map<String, String> status = statuses();
    String output = extraArgs.get("output");
    Map<String, Long> committedOutput = null;
    Set<String> deadLettered = null;
    for (Produced record : produced) {
      Long upTo = committed.get(new TopicPartition(topic, record.partition()));
      if (upTo == null || record.offset() >= upTo) {
        continue;
      }
      String state = status.get(storedKey(record.key()));
      if ("SUCCESS".equals(state) || "FAILED".equals(state)) {
        continue;
      }
      if (output != null && "PROCESSING".equals(state)) {
        // In a Kafka transaction the offset commits with the record's output, and SUCCESS is
        // written once that commit is done: a key still PROCESSING in between is applied, not
        // dropped, when its output is committed.
        if (committedOutput == null) {
          committedOutput = receipts(output, "read_committed");
        }
        if (committedOutput.containsKey(record.key())) {
          continue;
        }
      }
      if (deadLettered == null) {
        deadLettered = deadLetters(Duration.ofSeconds(2)).keySet();
      }
      if (!deadLettered.contains(coordinates(record))) {
        violations.add(
            "I4: offset "
                + upTo
                + " of partition "
                + record.partition()
                + " committed past "
                + record.key()
                + "@"
                + record.offset()
                + " whose key is "
                + state);
        return;
      }
    }
  }

  /**
   * Waits for the run's first effect, whichever consumer applies it (with two consumers, either may
   * get the partitions first).
   */
  void awaitFirstEffect(Duration timeout) throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (queryLong("SELECT count(*) FROM effects") == 0) {
      if (System.nanoTime() > deadline) {
        StringBuilder outputs = new StringBuilder();
        for (ChildJvm child : consumers) {
          outputs.append("\n--- ").append(names.get(child)).append(":\n").append(child.output());
        }
        throw new AssertionError("no effect within " + timeout + "; consumer output:" + outputs);
      }
      Thread.sleep(100);
    }
  }

  /**
   * Waits until the group has committed every record and no key is in progress; records the time
   * from the last fault to then (I5).
   */
  void awaitDone(Duration timeout) throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (System.nanoTime() < deadline) {
      if ((share ? allSettled() : allCommitted())
          && queryLong("SELECT count(*) FROM consumer_dedup WHERE status = 'PROCESSING'") == 0) {
        long from = lastFaultEndNanos == 0 ? startNanos : lastFaultEndNanos;
        recoveryMillis = (System.nanoTime() - from) / 1_000_000;
        return;
      }
      Thread.sleep(200);
    }
    violations.add(
        "not done within "
            + timeout
            + ": committed "
            + committedOffsets()
            + ", end "
            + endOffsets()
            + "; consumer output:\n"
            + lastOutput());
  }

  private String lastOutput() {
    if (consumers.isEmpty()) {
      return "";
    }
    String out = consumers.get(consumers.size() - 1).output();
    return out.length() > 6000 ? out.substring(out.length() - 6000) : out;
  }

  /**
   * Whether the key of every produced record is SUCCESS or the record is on the dead-letter topic.
   */
  private boolean allSettled() {
    Map<String, String> status = statuses();
    List<Produced> open = new ArrayList<>();
    for (Produced record : produced) {
      if (!record.hasKey() || !"SUCCESS".equals(status.get(storedKey(record.key())))) {
        open.add(record);
      }
    }
    if (open.isEmpty()) {
      return true;
    }
    // Read the dead letters only once there can be enough of them.
    if (endOffset(new TopicPartition(topic + DLT_SUFFIX, 0)) < open.size()) {
      return false;
    }
    Set<String> dead = deadLetters(Duration.ofSeconds(2)).keySet();
    return open.stream().allMatch(record -> dead.contains(coordinates(record)));
  }

  /** A handler run, as {@link FaultConsumer} records it with {@code recordRuns=true}. */
  record HandlerRun(String key, String consumer, int delivery, long startedMs, long endedMs) {
    long millis() {
      return endedMs - startedMs;
    }
  }

  /**
   * The handler runs recorded so far, by start; a run that has not ended ends at Long.MAX_VALUE.
   */
  List<HandlerRun> handlerRuns() {
    List<HandlerRun> runs = new ArrayList<>();
    try (Connection connection = database.connect(schema);
        Statement statement = connection.createStatement();
        ResultSet rs =
            statement.executeQuery(
                "SELECT biz_key, consumer, delivery, started_ms, ended_ms FROM handler_runs"
                    + " ORDER BY started_ms")) {
      while (rs.next()) {
        long ended = rs.getLong(5);
        runs.add(
            new HandlerRun(
                rs.getString(1),
                rs.getString(2),
                rs.getInt(3),
                rs.getLong(4),
                rs.wasNull() ? Long.MAX_VALUE : ended));
      }
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
    return runs;
  }

  /** Pairs of runs of one key that ran at the same time, described; empty if none did. */
  static List<String> overlapping(List<HandlerRun> runs) {
    List<String> overlaps = new ArrayList<>();
    for (int i = 0; i < runs.size(); i++) {
      for (int j = i + 1; j < runs.size(); j++) {
        HandlerRun a = runs.get(i);
        HandlerRun b = runs.get(j);
        if (a.key().equals(b.key()) && a.startedMs() < b.endedMs() && b.startedMs() < a.endedMs()) {
          overlaps.add(
              a.key()
                  + ": "
                  + a.consumer()
                  + " ran it "
                  + a.startedMs()
                  + ".."
                  + a.endedMs()
                  + ", "
                  + b.consumer()
                  + " "
                  + b.startedMs()
                  + ".."
                  + b.endedMs());
        }
      }
    }
    return overlaps;
  }

  /**
   * Stops the consumers cleanly, then returns what is left in the share group's queue: the records
   * a new consumer acquires within {@code window}. Empty when every record was accepted or rejected
   * (none released for another delivery, none waiting).
   */
  List<ConsumerRecord<String, String>> queueLeft(Duration window) throws Exception {
    // All asked at once: each finishes its record in hand and sends its acknowledgements.
    List<ChildJvm> stopping = new ArrayList<>();
    for (ChildJvm child : consumers) {
      if (child.isAlive()) {
        child.send("stop");
        stopping.add(child);
      }
    }
    for (ChildJvm child : stopping) {
      int code = child.awaitExit(Duration.ofSeconds(30));
      if (!child.output().contains("STOPPED")) {
        throw new AssertionError(
            "A consumer did not stop cleanly (exit code " + code + "):\n" + child.output());
      }
    }
    return TestShareGroups.remaining(group, topic, window);
  }

  boolean allCommitted() {
    Map<TopicPartition, Long> committed = committedOffsets();
    Map<TopicPartition, Long> end = endOffsets();
    for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
      if (e.getValue() > 0 && !e.getValue().equals(committed.get(e.getKey()))) {
        return false;
      }
    }
    return true;
  }

  /**
   * The run's one admin client: the offset watcher and {@link #awaitDone} look at the offsets
   * several times a second, and a client made for each look (threads, connections, metadata) took
   * CPU from the consumers under test on a machine of two cores.
   */
  private synchronized Admin admin() {
    if (admin == null) {
      Properties properties = new Properties();
      properties.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, TestKafka.bootstrapServers());
      admin = Admin.create(properties);
    }
    return admin;
  }

  /** The group's committed offsets, through the run's admin client. */
  Map<TopicPartition, Long> committedOffsets() {
    return TestKafka.committedOffsets(admin(), group);
  }

  /**
   * The offset the next record written to {@code partition} gets (the high watermark, as {@link
   * TestKafka#endOffset} reads it).
   */
  long endOffset(TopicPartition partition) {
    try {
      return admin()
          .listOffsets(Map.of(partition, OffsetSpec.latest()))
          .partitionResult(partition)
          .get()
          .offset();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    } catch (ExecutionException e) {
      throw new IllegalStateException("Could not read the end offset of " + partition, e);
    }
  }

  private Map<TopicPartition, Long> endOffsets() {
    Map<TopicPartition, Long> end = new HashMap<>();
    for (int p = 0; p < PARTITIONS; p++) {
      TopicPartition partition = new TopicPartition(topic, p);
      end.put(partition, endOffset(partition));
    }
    return end;
  }

  // ---- the invariants

  /** What the run found. */
  record Verdict(
      String name,
      String mode,
      int records,
      int lost,
      int duplicates,
      int window,
      int kills,
      int deadLettered,
      long recoveryMillis,
      long recoveryBoundMillis,
      List<String> violations,
      List<String> notes) {
    boolean passed() {
      return violations.isEmpty();
    }
  }

  Verdict verify() throws InterruptedException {
    watching = false;
    if (offsetWatcher != null) {
      offsetWatcher.join(5_000);
    }
    for (ChildJvm child : consumers) {
      child.close();
      Reliability.saveOutput(name + " " + modeLabel(), names.get(child), child.output());
    }
    Map<String, String> status = statuses();
    Map<String, DeadLetter> dlt = deadLetters(Duration.ofSeconds(3));
    // I1: nothing lost.
    int lost = 0;
    for (Produced record : produced) {
      DeadLetter dead = dlt.get(coordinates(record));
      if (dead != null) {
        if (dead.exceptionClass() == null) {
          violations.add("I1: " + record.key() + " is on the dead-letter topic without a reason");
        }
        continue;
      }
      String state = status.get(storedKey(record.key()));
      if (!"SUCCESS".equals(state)) {
        lost++;
        violations.add(
            "I1: "
                + abbreviate(record.key())
                + "@"
                + record.partition()
                + "/"
                + record.offset()
                + " is "
                + state
                + " and not on the dead-letter topic");
      }
    }
    // I2: one effect per SUCCESS key.
    int duplicates =
        (int)
            queryLong(
                "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM effects"
                    + " GROUP BY biz_key) per_key");
    long orphans =
        queryLong(
            "SELECT count(*) FROM effects e WHERE NOT EXISTS (SELECT 1 FROM consumer_dedup d"
                + " WHERE d.biz_key = e.biz_key AND d.status = 'SUCCESS')"
                + " AND char_length(e.biz_key) <= 256");
    if (orphans > 0) {
      violations.add("I2: " + orphans + " effects of keys that are not SUCCESS");
    }
    // I2: and not fewer. A key SUCCESS without its effect is a record acknowledged but never
    // applied: counting only duplicates and orphans, a library that marked SUCCESS without running
    // the handler would pass.
    if (effectsInTable) {
      Set<String> applied = effectKeys();
      List<String> unapplied = new ArrayList<>();
      for (Produced record : produced) {
        if (dlt.containsKey(coordinates(record))
            || !"SUCCESS".equals(status.get(storedKey(record.key())))) {
          continue;
        }
        if (!applied.contains(record.key())) {
          unapplied.add(abbreviate(record.key()));
        }
      }
      if (!unapplied.isEmpty()) {
        lost += unapplied.size();
        violations.add(
            "I2: "
                + unapplied.size()
                + " key(s) SUCCESS without an effect: "
                + unapplied.subList(0, Math.min(10, unapplied.size())));
      }
    }
    if (transactional() && duplicates > 0) {
      violations.add("I2: " + duplicates + " duplicate effects in mode TRANSACTIONAL");
    }
    if (!transactional()) {
      List<String> unexplained = new ArrayList<>();
      appliedMoreThanOnce()
          .forEach(
              (key, n) -> {
                int caught = windowKeys.getOrDefault(key, 0);
                if (n - 1 > caught) {
                  unexplained.add(
                      abbreviate(key) + " applied " + n + " times, " + caught + " caught");
                }
              });
      if (!unexplained.isEmpty()) {
        violations.add(
            "I2: "
                + duplicates
                + " duplicate effects ("
                + window
                + " records caught in the window by the kills), of "
                + unexplained.size()
                + " key(s) more often than the windows of their own key explain: "
                + unexplained.subList(0, Math.min(10, unexplained.size())));
      }
    }
    // I3: no PROCESSING row whose lease has passed.
    long expired =
        queryLong(
            "SELECT count(*) FROM consumer_dedup WHERE status = 'PROCESSING' AND lease_until < "
                + database.now());
    if (expired > 0) {
      violations.add("I3: " + expired + " PROCESSING rows whose lease has passed");
    }
    // I4: everything committed. A share group commits no offsets: a record it archived unapplied
    // is not SUCCESS, which I1 counts as lost.
    if (!share && !allCommitted()) {
      violations.add("I4: committed " + committedOffsets() + " != end " + endOffsets());
    }
    // I5: recovery in time. A killed share consumer keeps its partitions until the broker's share
    // session timeout; then its acquired records' locks have long run out.
    long bound = lease.plus(share ? SHARE_SESSION_TIMEOUT : SESSION_TIMEOUT).plus(SLACK).toMillis();
    if (lastFaultEndNanos != 0 && recoveryMillis > bound) {
      violations.add(
          "I5: recovered " + recoveryMillis + " ms after the last fault, over " + bound + " ms");
    }
    return new Verdict(
        name,
        modeLabel(),
        produced.size(),
        lost,
        duplicates,
        window,
        kills,
        dlt.size(),
        recoveryMillis,
        bound,
        List.copyOf(violations),
        List.copyOf(notes));
  }

  private String modeLabel() {
    return mode + (batched ? " batched" : " per-record");
  }

  void violation(String text) {
    violations.add(text);
  }

  /**
   * A record on a dead-letter topic: the coordinates ({@code partition/offset}) of the record it
   * stands for and the reason given, from {@link KafkaDeadLetterPublisher}'s headers (plain
   * consumer) or spring-kafka's {@code kafka_dlt-*} headers (Spring Boot consumer).
   */
  record DeadLetter(String origin, @Nullable String exceptionClass, @Nullable String message) {
    /** The exception's simple name, or null when the dead letter gives no reason. */
    @Nullable String exceptionName() {
      return exceptionClass == null
          ? null
          : exceptionClass.substring(exceptionClass.lastIndexOf('.') + 1);
    }
  }

  /** The dead-lettered records, by the coordinates of the record they stand for. */
  Map<String, DeadLetter> deadLetters(Duration timeout) {
    Map<String, DeadLetter> byOrigin = new HashMap<>();
    for (ConsumerRecord<byte[], byte[]> record : readAll(topic + DLT_SUFFIX, timeout)) {
      DeadLetter dead =
          record.headers().lastHeader(KafkaDeadLetterPublisher.ORIGINAL_PARTITION_HEADER) != null
              ? publishedByThePollLoop(record)
              : publishedBySpringKafka(record);
      byOrigin.put(dead.origin(), dead);
    }
    return byOrigin;
  }

  private static DeadLetter publishedByThePollLoop(ConsumerRecord<byte[], byte[]> record) {
    return new DeadLetter(
        header(record, KafkaDeadLetterPublisher.ORIGINAL_PARTITION_HEADER)
            + "/"
            + header(record, KafkaDeadLetterPublisher.ORIGINAL_OFFSET_HEADER),
        header(record, KafkaDeadLetterPublisher.EXCEPTION_CLASS_HEADER),
        header(record, KafkaDeadLetterPublisher.EXCEPTION_MESSAGE_HEADER));
  }

  private static DeadLetter publishedBySpringKafka(ConsumerRecord<byte[], byte[]> record) {
    // spring-kafka wraps the listener's exception: the cause is what the listener threw.
    String thrown = header(record, KafkaHeaders.DLT_EXCEPTION_FQCN);
    String cause = header(record, KafkaHeaders.DLT_EXCEPTION_CAUSE_FQCN);
    return new DeadLetter(
        ByteBuffer.wrap(bytes(record, KafkaHeaders.DLT_ORIGINAL_PARTITION)).getInt()
            + "/"
            + ByteBuffer.wrap(bytes(record, KafkaHeaders.DLT_ORIGINAL_OFFSET)).getLong(),
        cause != null && thrown != null && thrown.endsWith("ListenerExecutionFailedException")
            ? cause
            : thrown,
        header(record, KafkaHeaders.DLT_EXCEPTION_MESSAGE));
  }

  private List<ConsumerRecord<byte[], byte[]>> readAll(String dltTopic, Duration timeout) {
    long count = endOffset(new TopicPartition(dltTopic, 0));
    return count == 0 ? List.of() : TestKafka.readRawFromStart(dltTopic, (int) count, timeout);
  }

  private static byte[] bytes(ConsumerRecord<byte[], byte[]> record, String name) {
    Header header = record.headers().lastHeader(name);
    if (header == null) {
      throw new AssertionError("a dead letter without its " + name + " header");
    }
    return header.value();
  }

  private static @Nullable String header(ConsumerRecord<byte[], byte[]> record, String name) {
    Header header = record.headers().lastHeader(name);
    return header == null ? null : new String(header.value(), StandardCharsets.UTF_8);
  }

  static String coordinates(Produced record) {
    return record.partition() + "/" + record.offset();
  }

  /**
   * Whether {@code record} (as a share consumer of the checks reads it) carries a key whose SUCCESS
   * is in the dedup table: a copy the next consumer accepts as a duplicate, with nothing to apply.
   */
  boolean ofAppliedKey(ConsumerRecord<String, String> record) {
    var header = record.headers().lastHeader(FaultConsumer.KEY_HEADER);
    if (header == null) {
      return false;
    }
    String key = new String(header.value(), StandardCharsets.UTF_8);
    return "SUCCESS".equals(statuses().get(storedKey(key)));
  }

  /** The keys that have more than one row of {@code effects}, with their number of rows. */
  private Map<String, Integer> appliedMoreThanOnce() {
    Map<String, Integer> keys = new HashMap<>();
    try (Connection connection = database.connect(schema);
        Statement statement = connection.createStatement();
        ResultSet rs =
            statement.executeQuery(
                "SELECT biz_key, count(*) FROM effects GROUP BY biz_key HAVING count(*) > 1")) {
      while (rs.next()) {
        keys.put(rs.getString(1), rs.getInt(2));
      }
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
    return keys;
  }

  /** The keys that have at least one row of {@code effects}. */
  private Set<String> effectKeys() {
    Set<String> keys = new java.util.HashSet<>();
    try (Connection connection = database.connect(schema);
        Statement statement = connection.createStatement();
        ResultSet rs = statement.executeQuery("SELECT DISTINCT biz_key FROM effects")) {
      while (rs.next()) {
        keys.add(rs.getString(1));
      }
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
    return keys;
  }

  private Map<String, String> statuses() {
    Map<String, String> status = new HashMap<>();
    try (Connection connection = database.connect(schema);
        Statement statement = connection.createStatement();
        ResultSet rs = statement.executeQuery("SELECT biz_key, status FROM consumer_dedup")) {
      while (rs.next()) {
        status.put(rs.getString(1), rs.getString(2));
      }
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
    return status;
  }

  /** The key as the dedup table stores it: over 256 characters, its SHA-256. */
  static String storedKey(String key) {
    if (key.length() <= 256) {
      return key;
    }
    try {
      return "sha256:"
          + HexFormat.of()
              .formatHex(
                  MessageDigest.getInstance("SHA-256")
                      .digest(key.getBytes(StandardCharsets.UTF_8)));
    } catch (java.security.NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  static String abbreviate(String key) {
    return key.length() > 40 ? key.substring(0, 40) + "...(" + key.length() + " chars)" : key;
  }

  /** A pool on the run's namespace, straight to the server (for scenarios run in this JVM). */
  HikariDataSource pool(int size) {
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(database.url(schema));
    config.setMaximumPoolSize(size);
    return new HikariDataSource(config);
  }

  long queryLong(String sql, Object... args) {
    try (Connection connection = database.connect(schema);
        PreparedStatement statement = connection.prepareStatement(sql)) {
      for (int i = 0; i < args.length; i++) {
        statement.setObject(i + 1, args[i]);
      }
      try (ResultSet rs = statement.executeQuery()) {
        rs.next();
        return rs.getLong(1);
      }
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
  }

  void execute(String sql) {
    try (Connection connection = database.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute(sql);
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
  }

  @Override
  public void close() throws Exception {
    watching = false;
    for (ChildJvm child : consumers) {
      child.close();
    }
    if (proxy != null) {
      proxy.close();
    }
    extraProxies.forEach(TcpProxy::close);
    synchronized (this) {
      if (admin != null) {
        admin.close(Duration.ofSeconds(5));
      }
    }
    database.drop(schema);
  }
}
