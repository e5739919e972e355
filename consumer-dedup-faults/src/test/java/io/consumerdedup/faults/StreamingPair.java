package io.consumerdedup.faults;

import io.consumerdedup.testing.TcpProxy;
import io.consumerdedup.testing.TestDatabase;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Assumptions;

/**
 * A PostgreSQL primary and its streaming standby, made for one scenario under a temporary folder on
 * spare ports ({@code initdb}, {@code pg_basebackup -R}) and removed with it. The standby streams
 * through a {@link TcpProxy}, so the replication link can lag (asynchronous replication behind by a
 * delay) and be cut the moment the primary dies, as when its host goes away with the WAL still in
 * flight. The binaries are PostgreSQL 15's ({@code DEDUP_TEST_PG_BIN}, default {@code
 * /usr/lib/postgresql/15/bin}); run as root, the servers run as the {@code postgres} user.
 */
final class StreamingPair implements AutoCloseable {
  static final String BIN_VARIABLE = "DEDUP_TEST_PG_BIN";
  private static final String DEFAULT_BIN = "/usr/lib/postgresql/15/bin";
  private static final Duration COMMAND_TIMEOUT = Duration.ofSeconds(120);

  private final Path bin;
  private final Path base;
  private final Path primaryData;
  private final Path standbyData;
  final int primaryPort;
  final int standbyPort;
  private @Nullable TcpProxy replication;
  private final boolean asRoot = "root".equals(System.getProperty("user.name"));

  /**
   * @param synchronous the standby is synchronous and commits wait until it applied them ({@code
   *     synchronous_commit=remote_apply}); else replication is asynchronous
   */
  StreamingPair(boolean synchronous) throws Exception {
    bin = Path.of(System.getenv().getOrDefault(BIN_VARIABLE, DEFAULT_BIN));
    if (!Files.isExecutable(bin.resolve("initdb"))) {
      String message =
          "The failover scenarios need the PostgreSQL 15 server binaries in "
              + bin
              + " (Debian: apt-get install postgresql-15; or set "
              + BIN_VARIABLE
              + " to their folder)";
      if ("true".equals(System.getenv("CI"))) {
        throw new IllegalStateException(message);
      }
      Assumptions.abort(message);
    }
    base = Files.createTempDirectory("dedup-failover-");
    primaryData = base.resolve("primary");
    standbyData = base.resolve("standby");
    primaryPort = sparePort();
    standbyPort = sparePort();
    try {
      start(synchronous);
    } catch (Exception | Error e) {
      close();
      throw e;
    }
  }

  private void start(boolean synchronous) throws Exception {
    if (asRoot) {
      run("chown", "postgres:postgres", base.toString());
    }
    // --no-sync: the servers are thrown away with the scenario, nothing needs the disk's guarantee.
    asPostgres(
        "initdb",
        "-D",
        primaryData.toString(),
        "-U",
        "postgres",
        "--auth=trust",
        "-E",
        "UTF8",
        "--no-sync");
    appendConfig(
        primaryData,
        "port = " + primaryPort,
        "listen_addresses = '127.0.0.1'",
        "unix_socket_directories = '" + base + "'",
        "max_connections = 60",
        "shared_buffers = 32MB",
        "wal_level = replica",
        "max_wal_senders = 4",
        "wal_keep_size = 256MB",
        "fsync = off");
    asPostgres(
        "pg_ctl",
        "-D",
        primaryData.toString(),
        "-l",
        base.resolve("primary.log").toString(),
        "-w",
        "start");
    try (Connection connection = connect(primaryPort, "postgres");
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE DATABASE test");
    }
    TcpProxy link = TcpProxy.start("127.0.0.1", primaryPort);
    replication = link;
    asPostgres(
        "pg_basebackup",
        "-d",
        "host=127.0.0.1 port=" + link.port() + " user=postgres",
        "-D",
        standbyData.toString(),
        "-R",
        "-X",
        "stream",
        // A spread checkpoint (the default) made the copy wait about a minute and a half.
        "--checkpoint=fast",
        "--no-sync");
    appendConfig(standbyData, "port = " + standbyPort, "hot_standby = on");
    asPostgres(
        "pg_ctl",
        "-D",
        standbyData.toString(),
        "-l",
        base.resolve("standby.log").toString(),
        "-w",
        "start");
    try (Connection connection = connect(primaryPort, "postgres");
        Statement statement = connection.createStatement()) {
      // Only now that the standby streams: a synchronous primary without it would wait forever.
      if (synchronous) {
        statement.execute("ALTER SYSTEM SET synchronous_standby_names = '*'");
        statement.execute("ALTER SYSTEM SET synchronous_commit = 'remote_apply'");
        statement.execute("SELECT pg_reload_conf()");
      }
      awaitStandby(statement, synchronous ? "sync" : "async");
    }
  }

  private static void awaitStandby(Statement statement, String syncState) throws Exception {
    long deadline = System.nanoTime() + COMMAND_TIMEOUT.toNanos();
    while (System.nanoTime() < deadline) {
      try (ResultSet rows =
          statement.executeQuery(
              "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
                  + " AND sync_state = '"
                  + syncState
                  + "'")) {
        rows.next();
        if (rows.getInt(1) == 1) {
          return;
        }
      }
      Thread.sleep(100);
    }
    throw new IllegalStateException("The standby did not stream as " + syncState + " in time");
  }

  /** A multi-host URL as an application writes it, on {@code schema} of database test. */
  String url(String schema) {
    return "jdbc:postgresql://127.0.0.1:"
        + primaryPort
        + ",127.0.0.1:"
        + standbyPort
        + "/test?user=postgres&targetServerType=primary&connectTimeout=2&currentSchema="
        + schema;
  }

  /** Creates {@code schema} on the primary with the shipped dedup table. */
  void createSchema(String schema) throws SQLException {
    try (Connection connection = connect(primaryPort, "test");
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE SCHEMA " + schema);
      statement.execute("SET search_path TO " + schema);
      statement.execute(TestDatabase.schemaDdl());
    }
  }

  /** Every WAL record reaches the standby {@code delay} after it left the primary. */
  void lag(Duration delay) {
    java.util.Objects.requireNonNull(replication).latency(delay);
  }

  /**
   * The primary's host goes away: the replication link is cut (the WAL in flight is lost) and every
   * process of the primary is killed (SIGKILL).
   */
  void killPrimary() throws IOException {
    java.util.Objects.requireNonNull(replication).refuse();
    long pid =
        Long.parseLong(
            Files.readAllLines(primaryData.resolve("postmaster.pid"), StandardCharsets.UTF_8)
                .get(0)
                .trim());
    ProcessHandle postmaster = ProcessHandle.of(pid).orElseThrow();
    List<ProcessHandle> processes = new ArrayList<>(postmaster.descendants().toList());
    processes.add(0, postmaster);
    processes.forEach(ProcessHandle::destroyForcibly);
    for (ProcessHandle process : processes) {
      process.onExit().orTimeout(10, TimeUnit.SECONDS).join();
    }
  }

  /**
   * The standby's host goes away while the primary lives: the replication link is cut, and a
   * synchronous primary's commits wait for a standby that does not come.
   */
  void cutReplication() {
    java.util.Objects.requireNonNull(replication).refuse();
  }

  /** Promotes the standby and waits until it accepts writes. */
  void promoteStandby() throws Exception {
    asPostgres("pg_ctl", "-D", standbyData.toString(), "-w", "promote");
  }

  /** A connection to database {@code test} on the standby (the primary after promotion). */
  Connection connectStandby() throws SQLException {
    return connect(standbyPort, "test");
  }

  /** The last lines of both servers' logs, for a failed scenario. */
  String logs() {
    StringBuilder text = new StringBuilder();
    for (String name : List.of("primary.log", "standby.log")) {
      try {
        List<String> lines = Files.readAllLines(base.resolve(name));
        text.append("--- ").append(name).append('\n');
        lines
            .subList(Math.max(0, lines.size() - 30), lines.size())
            .forEach(line -> text.append(line).append('\n'));
      } catch (IOException e) {
        text.append(name).append(": ").append(e).append('\n');
      }
    }
    return text.toString();
  }

  private static Connection connect(int port, String database) throws SQLException {
    return DriverManager.getConnection(
        "jdbc:postgresql://127.0.0.1:" + port + "/" + database + "?user=postgres");
  }

  private static void appendConfig(Path data, String... lines) throws IOException {
    Files.writeString(
        data.resolve("postgresql.auto.conf"),
        String.join("\n", lines) + "\n",
        StandardCharsets.UTF_8,
        java.nio.file.StandardOpenOption.APPEND);
  }

  private void asPostgres(String program, String... args) throws Exception {
    List<String> command = new ArrayList<>();
    if (asRoot) {
      command.addAll(List.of("runuser", "-u", "postgres", "--"));
    }
    command.add(bin.resolve(program).toString());
    command.addAll(List.of(args));
    run(command.toArray(String[]::new));
  }

  private void run(String... command) throws Exception {
    Path output = Files.createTempFile("dedup-failover-command", ".log");
    try {
      Process process =
          new ProcessBuilder(command)
              .redirectErrorStream(true)
              .redirectOutput(output.toFile())
              .directory(base == null ? null : base.toFile())
              .start();
      if (!process.waitFor(COMMAND_TIMEOUT.toSeconds(), TimeUnit.SECONDS)) {
        process.destroyForcibly();
        throw new IllegalStateException(String.join(" ", command) + " did not end in time");
      }
      if (process.exitValue() != 0) {
        throw new IllegalStateException(
            String.join(" ", command) + " failed:\n" + Files.readString(output));
      }
    } finally {
      Files.deleteIfExists(output);
    }
  }

  private static int sparePort() throws IOException {
    try (ServerSocket socket = new ServerSocket(0)) {
      return socket.getLocalPort();
    }
  }

  /** Stops both servers (whatever is left of them) and removes their folder. */
  @Override
  public void close() throws Exception {
    for (Path data : List.of(standbyData, primaryData)) {
      if (Files.exists(data.resolve("postmaster.pid"))) {
        try {
          asPostgres("pg_ctl", "-D", data.toString(), "-m", "immediate", "-w", "stop");
        } catch (IllegalStateException e) {
          // Killed already: its pid file is left behind.
        }
      }
    }
    if (replication != null) {
      replication.close();
    }
    try (Stream<Path> paths = Files.walk(base)) {
      paths.sorted(Comparator.reverseOrder()).forEach(StreamingPair::delete);
    }
  }

  private static void delete(Path path) {
    try {
      Files.delete(path);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
