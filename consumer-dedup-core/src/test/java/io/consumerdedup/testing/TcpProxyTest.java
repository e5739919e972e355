package io.consumerdedup.testing;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import java.net.SocketException;
import java.net.SocketTimeoutException;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.concurrent.Executor;
import org.awaitility.Awaitility;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The proxy's faults against the real PostgreSQL server, as the driver sees them: each test checks
 * both what the client got and the proxy's counters, so a fault that did not happen fails it.
 */
class TcpProxyTest {
  private static final Executor DIRECT = Runnable::run;

  private static String schema;

  @BeforeAll
  static void setUp() throws SQLException {
    schema = TestDatabase.newSchema("proxy");
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE TABLE probe (id int PRIMARY KEY)");
    }
  }

  @AfterAll
  static void tearDown() {
    TestDatabase.dropSchema(schema);
  }

  @Test
  void rewriteKeepsPathAndQuery() {
    try (TcpProxy proxy = TcpProxy.start("127.0.0.1", 5432)) {
      String through = "jdbc:postgresql://127.0.0.1:" + proxy.port();

      assertThat(proxy.rewrite("jdbc:postgresql://db.example:6543/test?user=x&ssl=false"))
          .isEqualTo(through + "/test?user=x&ssl=false");
      assertThat(proxy.rewrite("jdbc:postgresql://localhost/test")).isEqualTo(through + "/test");
      assertThat(proxy.rewrite("jdbc:postgresql://[::1]:5432/")).isEqualTo(through + "/");
      assertThatThrownBy(() -> proxy.rewrite("jdbc:postgresql://a:1,b:2/test"))
          .isInstanceOf(IllegalArgumentException.class);
    }
  }

  @Test
  void passForwardsQueriesOfAPool() throws SQLException {
    try (TcpProxy proxy = TcpProxy.forPostgres();
        HikariDataSource pool = pool(proxy);
        Connection connection = pool.getConnection()) {
      assertThat(selectOne(connection)).isEqualTo(1);

      assertThat(proxy.connectionsAccepted()).isPositive();
      assertThat(proxy.connectionsReset()).isZero();
    }
  }

  @Test
  void refuseResetsOpenConnectionsAndRefusesNewOnesUntilPass() throws SQLException {
    try (TcpProxy proxy = TcpProxy.forPostgres()) {
      // One socket per connection: at the driver's default sslmode=prefer a connection may open a
      // second one, and a loaded CI machine counted such a socket after the count below was read.
      String url = proxy.rewrite(TestDatabase.url(schema)) + "&sslmode=disable";
      try (Connection open = DriverManager.getConnection(url)) {
        assertThat(selectOne(open)).isEqualTo(1);

        proxy.refuse();

        assertThatThrownBy(() -> selectOne(open))
            .isInstanceOf(SQLException.class)
            .satisfies(e -> assertThat(((SQLException) e).getSQLState()).startsWith("08"));
      }
      assertThat(proxy.connectionsReset()).isEqualTo(1);
      int acceptedBeforeTheAttempt = proxy.connectionsAccepted();

      long start = System.nanoTime();
      assertThatThrownBy(() -> DriverManager.getConnection(url).close())
          .isInstanceOf(SQLException.class)
          // Refused (ConnectException) as a rule; rarely a reset instead: the closed port lies in
          // the ephemeral range, and a client socket given that very port connects to itself.
          .hasRootCauseInstanceOf(SocketException.class)
          .satisfies(e -> assertThat(((SQLException) e).getSQLState()).startsWith("08"));
      assertThat(Duration.ofNanos(System.nanoTime() - start))
          .as("refused, not timed out")
          .isLessThan(Duration.ofSeconds(5));
      assertThat(proxy.connectionsAccepted())
          .as("nothing accepted while refusing")
          .isEqualTo(acceptedBeforeTheAttempt);

      proxy.pass();

      try (Connection fresh = DriverManager.getConnection(url)) {
        assertThat(selectOne(fresh)).isEqualTo(1);
      }
      assertThat(proxy.connectionsAccepted()).isGreaterThan(acceptedBeforeTheAttempt);
    }
  }

  @Test
  void blackholeLeavesAReadHangingUntilTheClientsTimeoutWithoutAReset() throws SQLException {
    try (TcpProxy proxy = TcpProxy.forPostgres()) {
      String url = proxy.rewrite(TestDatabase.url(schema));
      try (Connection open = DriverManager.getConnection(url)) {
        assertThat(selectOne(open)).isEqualTo(1);
        open.setNetworkTimeout(DIRECT, 1_000);

        proxy.blackhole();

        long start = System.nanoTime();
        assertThatThrownBy(() -> selectOne(open))
            .isInstanceOf(SQLException.class)
            .hasRootCauseInstanceOf(SocketTimeoutException.class)
            .satisfies(e -> assertThat(((SQLException) e).getSQLState()).startsWith("08"));
        assertThat(Duration.ofNanos(System.nanoTime() - start))
            .as("hung until the client's own timeout")
            .isGreaterThanOrEqualTo(Duration.ofMillis(950));
      }

      // A new connection is accepted, but its startup gets no answer. (The driver may try twice,
      // once with and once without SSL, each on a connection of its own.)
      assertThatThrownBy(() -> DriverManager.getConnection(url + "&socketTimeout=1").close())
          .isInstanceOf(SQLException.class)
          .hasRootCauseInstanceOf(SocketTimeoutException.class);
      int accepted = proxy.connectionsAccepted();
      assertThat(accepted).isGreaterThanOrEqualTo(2);
      assertThat(proxy.connectionsReset()).as("no reset in blackhole").isZero();

      proxy.pass();

      assertThat(proxy.connectionsReset())
          .as("every connection open during the blackhole is reset on leaving it")
          .isEqualTo(accepted);
      try (Connection fresh = DriverManager.getConnection(url)) {
        assertThat(selectOne(fresh)).isEqualTo(1);
      }
    }
  }

  @Test
  void latencyDelaysTheRequestAndTheReply() throws SQLException {
    Duration latency = Duration.ofMillis(200);
    try (TcpProxy proxy = TcpProxy.forPostgres();
        Connection connection =
            DriverManager.getConnection(proxy.rewrite(TestDatabase.url(schema)))) {
      assertThat(selectOne(connection)).isEqualTo(1);

      proxy.latency(latency);
      long start = System.nanoTime();
      assertThat(selectOne(connection)).isEqualTo(1);

      assertThat(Duration.ofNanos(System.nanoTime() - start))
          .as("one round trip, delayed each way")
          .isGreaterThanOrEqualTo(latency.multipliedBy(2));
      proxy.pass();
      assertThat(selectOne(connection)).isEqualTo(1);
      assertThat(proxy.connectionsReset()).isZero();
    }
  }

  @Test
  void aDroppedReplyCutsTheConnectionAfterTheCommit() throws SQLException {
    try (TcpProxy proxy = TcpProxy.forPostgres()) {
      String url = proxy.rewrite(TestDatabase.url(schema));
      try (Connection connection = DriverManager.getConnection(url);
          Statement statement = connection.createStatement()) {
        assertThat(connection.getAutoCommit()).isTrue();

        proxy.dropNextReplyAndCut();

        assertThatThrownBy(() -> statement.executeUpdate("INSERT INTO probe VALUES (1)"))
            .isInstanceOf(SQLException.class)
            .satisfies(e -> assertThat(((SQLException) e).getSQLState()).startsWith("08"));
      }
      assertThat(proxy.repliesDropped()).isEqualTo(1);
      assertThat(proxy.connectionsReset()).isEqualTo(1);

      try (Connection direct = TestDatabase.connect(schema);
          Statement statement = direct.createStatement();
          ResultSet rows = statement.executeQuery("SELECT count(*) FROM probe WHERE id = 1")) {
        rows.next();
        assertThat(rows.getInt(1)).as("committed though the client saw an error").isEqualTo(1);
      }
      try (Connection fresh = DriverManager.getConnection(url)) {
        assertThat(selectOne(fresh)).as("the fault was one-shot").isEqualTo(1);
      }
      assertThat(proxy.repliesDropped()).isEqualTo(1);
    }
  }

  @Test
  void cutAllResetsOpenConnectionsAndKeepsPassing() throws SQLException {
    try (TcpProxy proxy = TcpProxy.forPostgres()) {
      String url = proxy.rewrite(TestDatabase.url(schema));
      try (Connection open = DriverManager.getConnection(url)) {
        assertThat(selectOne(open)).isEqualTo(1);

        proxy.cutAll();

        assertThatThrownBy(() -> selectOne(open))
            .isInstanceOf(SQLException.class)
            .satisfies(e -> assertThat(((SQLException) e).getSQLState()).startsWith("08"));
      }
      assertThat(proxy.connectionsReset()).isEqualTo(1);
      try (Connection fresh = DriverManager.getConnection(url)) {
        assertThat(selectOne(fresh)).isEqualTo(1);
      }
    }
  }

  @Test
  void closeEndsEveryThreadOfTheProxy() throws SQLException {
    TcpProxy proxy = TcpProxy.forPostgres();
    String prefix = "tcp-proxy-" + proxy.port() + "-";
    Connection connection = DriverManager.getConnection(proxy.rewrite(TestDatabase.url(schema)));
    try {
      assertThat(selectOne(connection)).isEqualTo(1);
      assertThat(threadsNamed(prefix)).as("acceptor and four pipe threads").isEqualTo(5);

      proxy.close();

      Awaitility.await()
          .atMost(Duration.ofSeconds(5))
          .untilAsserted(() -> assertThat(threadsNamed(prefix)).isZero());
    } finally {
      connection.abort(DIRECT); // close() would report the reset
    }
  }

  private static long threadsNamed(String prefix) {
    return Thread.getAllStackTraces().keySet().stream()
        .filter(thread -> thread.isAlive() && thread.getName().startsWith(prefix))
        .count();
  }

  private static HikariDataSource pool(TcpProxy proxy) {
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(proxy.rewrite(TestDatabase.url(schema)));
    config.setMaximumPoolSize(2);
    config.setPoolName("proxy-" + schema);
    return new HikariDataSource(config);
  }

  private static int selectOne(Connection connection) throws SQLException {
    try (Statement statement = connection.createStatement();
        ResultSet row = statement.executeQuery("SELECT 1")) {
      row.next();
      return row.getInt(1);
    }
  }
}
