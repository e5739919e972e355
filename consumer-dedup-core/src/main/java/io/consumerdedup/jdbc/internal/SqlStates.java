package io.consumerdedup.jdbc.internal;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStoreDataException;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.internal.FailureTexts;
import java.net.UnknownHostException;
import java.sql.SQLException;
import java.sql.SQLRecoverableException;
import java.sql.SQLTimeoutException;
import java.sql.SQLTransientException;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.jspecify.annotations.Nullable;

/**
 * What a database error says about the next try: whether the connection (not the statement) was the
 * problem and a retry may succeed, or the data of this call was refused and never will be.
 */
public final class SqlStates {

  /** The kinds of failure a store call can meet. */
  public enum Kind {
    /** The connection failed, timed out, or the server was busy: a retry may succeed. */
    TRANSIENT,
    /**
     * The server refused this call's data (class 22 or 23): the same data is refused again (a store
     * call meets it twice, the second time on a fresh statement, before it says so).
     */
    DATA,
    /** Anything else, such as a missing table or a permission: an operator has to act. */
    OTHER
  }

  private static final String READ_ONLY = "25006";

  private static final String INSUFFICIENT_PRIVILEGE = "42501";

  private static final Set<Integer> MYSQL_ACCESS_DENIED = Set.of(1142, 1143);

  /**
   * MySQL's and MariaDB's ER_OPTION_PREVENTS_STATEMENT (SQL state HY000): the server runs with
   * {@code read_only} or {@code super_read_only}, as a replica or a primary demoted by a failover
   * does. The error names other options too, which none of the store's statements meet.
   */
  private static final int MYSQL_READ_ONLY = 1290;

  /**
   * MySQL's and MariaDB's answers of a server started with {@code innodb_read_only} (a replica or
   * standby so started; it cannot be set at runtime), which refuses every write to an InnoDB table
   * whatever the account's privileges, where {@code read_only}'s 1290 spares those with READ_ONLY
   * ADMIN (or SUPER): ER_OPEN_AS_READONLY (1036, "Table '...' is read only") as the statement's
   * error, and ER_READ_ONLY_MODE (1836, "Running in read-only mode"), which MySQL gives as the
   * error of some statements. Both SQL state HY000. A read-only transaction's refusal (1792) has
   * SQL state 25006, as PostgreSQL's standby's.
   */
  private static final Set<Integer> MYSQL_READ_ONLY_CODES = Set.of(MYSQL_READ_ONLY, 1036, 1836);

  private static final Set<String> TRANSIENT =
      Set.of(
          "40001", // serialization_failure
          "40P01", // deadlock_detected
          "55P03", // lock_not_available
          "57014", // query_canceled: the statement timeout fired
          "57P01", // admin_shutdown (pg_terminate_backend, a restart)
          "57P02", // crash_shutdown
          "57P03", // cannot_connect_now (starting up)
          // read_only_sql_transaction: the connection reaches a standby, or a primary demoted by a
          // failover, whose address the pool or DNS still gives (see isReadOnlyServer).
          READ_ONLY,
          // A pooler ran the transaction on a server connection that lacks the named statement or
          // has one of that name already (see PostgresPooler); 08P01 (a bind message that does not
          // fit the statement of that name) is a connection exception below.
          "26000", // invalid_sql_statement_name
          "42P05"); // duplicate_prepared_statement

  /**
   * MySQL and MariaDB errors worth another try, by vendor code (their SQL states, HY000 and 41000,
   * say nothing): lock wait timeout (1205), deadlock (1213, SQL state 40001 as well), statement
   * timeouts (MySQL's max_execution_time 3024, MariaDB's max_statement_time 1969), a statement an
   * operator killed (KILL QUERY, 1317, as PostgreSQL's query_canceled 57014), too many connections
   * (1040), too many of one user's (max_user_connections: 1203 for the server's setting, 1226 for
   * the account's, both SQL state 42000) or concurrent transactions (1637; all as PostgreSQL's
   * class 53, whose 53300 is the role's limit too), server shutting down (1053), lost connection
   * (2013), and MariaDB's "record has changed since last read" (1020): under
   * innodb_snapshot_isolation, on by default from 11.6, a transaction that locks a row committed
   * after its snapshot is rolled back and told to restart, as PostgreSQL's serialization failure.
   * MariaDB's driver reports 1317 as a timeout, MySQL's as a non-transient error: only the code
   * tells them alike. A server that runs read-only (1290, 1036, 1836) is one as well, as
   * PostgreSQL's 25006. So are a server out of room, as PostgreSQL's class 53 (disk_full 53100,
   * out_of_memory 53200): disk full (1021), a table that cannot grow (1114: its tablespace's disk
   * is full, or its size is capped), out of memory (1037, 1038 for a sort, both SQL state HY001;
   * 1041): once room is freed the next try goes through, so the call is tried again and the record
   * waits as for an outage, not failed at once and logged as an error of the setup at every
   * back-off step. And MySQL 8's 4031, the answer of a connection that the server closed for
   * inactivity (kept by a pool past wait_timeout): the retry takes another connection. (MariaDB's
   * own 4031 is an error of CREATE TRIGGER, which the store never sends.)
   */
  private static final Set<Integer> MYSQL_TRANSIENT_CODES =
      Set.of(
          1205,
          1213,
          1020,
          3024,
          1969,
          1317,
          1040,
          1203,
          1226,
          1637,
          1053,
          2013,
          1021,
          1114,
          1037,
          1038,
          1041,
          4031,
          MYSQL_READ_ONLY,
          1036,
          1836);

  /** MySQL's and MariaDB's statement timeouts (3024, 1969) and KILL QUERY (1317). */
  private static final Set<Integer> MYSQL_CANCELLED_CODES = Set.of(3024, 1969, 1317);

  /**
   * The SQL states MySQL and MariaDB give their transient errors; PostgreSQL uses none of them.
   * HY001 is their "memory allocation error", the state of 1037 and 1038.
   */
  private static final Set<String> MYSQL_STATES =
      Set.of("HY000", "HY001", "41000", "42000", "40001", "70100");

  private static final Pattern JDBC_URL = Pattern.compile("jdbc:[^\\s,;()]+");

  private static final Pattern LINE_END = Pattern.compile("[\\r\\n]");

  /**
   * A URL's scheme: its subprotocol, and the names after it only when an authority ({@code //})
   * follows them, so that an Oracle-style {@code jdbc:oracle:thin:app/secret@host} shows {@code
   * jdbc:oracle:}.
   */
  private static final Pattern SCHEME =
      Pattern.compile("jdbc:[A-Za-z][\\w.+-]*:(?:(?:[A-Za-z][\\w.+-]*:)*//)?");

  /**
   * A host (a name, an IPv4 or a bracketed IPv6 address) and its port, where the authority ends.
   */
  private static final Pattern HOST =
      Pattern.compile("(?:[\\w.-]+|\\[[\\p{XDigit}:.]+])(?::\\d{1,5})?(?=[/?#,;\\s]|$)");

  /** How deep the causes of a failed connection are searched for the driver's refusal. */
  private static final int MAX_CAUSES = 16;

  private SqlStates() {}

  public static Kind classify(SQLException e) {
    for (SQLException current = e; current != null; current = current.getNextException()) {
      if (current instanceof SQLTransientException
          || current instanceof SQLRecoverableException
          || current instanceof SQLTimeoutException) {
        return Kind.TRANSIENT;
      }
      String state = current.getSQLState();
      if (state == null) {
        continue;
      }
      // 08: connection exceptions; 53: insufficient resources (too many connections, disk full).
      if (state.startsWith("08") || state.startsWith("53") || TRANSIENT.contains(state)) {
        return Kind.TRANSIENT;
      }
      if (MYSQL_STATES.contains(state) && MYSQL_TRANSIENT_CODES.contains(current.getErrorCode())) {
        return Kind.TRANSIENT;
      }
      if (state.startsWith("22") || state.startsWith("23")) {
        return Kind.DATA;
      }
    }
    return Kind.OTHER;
  }

  /**
   * The role may not run the statement on the table: PostgreSQL's insufficient_privilege (42501),
   * MySQL's and MariaDB's table or column access denied (1142, 1143; SQL state 42000, which says
   * nothing by itself).
   */
  public static boolean isPermissionDenied(SQLException e) {
    for (SQLException current = e; current != null; current = current.getNextException()) {
      if (INSUFFICIENT_PRIVILEGE.equals(current.getSQLState())
          || MYSQL_ACCESS_DENIED.contains(current.getErrorCode())) {
        return true;
      }
    }
    return false;
  }

  /**
   * Whether {@code e} says the server refuses writes (SQL state 25006; on MySQL and MariaDB error
   * 1290 of {@code read_only}, or 1036 and 1836 of {@code innodb_read_only}): a hot standby or
   * replica, or a primary demoted by a failover. The connection is sound to its pool, which keeps
   * it for its whole lifetime, so only another connection can reach the promoted primary.
   */
  public static boolean isReadOnlyServer(SQLException e) {
    for (SQLException current = e; current != null; current = current.getNextException()) {
      if (READ_ONLY.equals(current.getSQLState())
          || ("HY000".equals(current.getSQLState())
              && MYSQL_READ_ONLY_CODES.contains(current.getErrorCode()))) {
        return true;
      }
    }
    return false;
  }

  /**
   * Whether {@code e} says the statement was cancelled: by the store at its statement timeout
   * (PostgreSQL's query_canceled 57014, which says "due to user request" when the store's watchdog
   * asks for the cancel; a driver's {@link SQLTimeoutException}; MySQL's max_execution_time 3024,
   * MariaDB's max_statement_time 1969), or by an operator (57014, KILL QUERY 1317).
   */
  public static boolean isCancelled(SQLException e) {
    for (SQLException current = e; current != null; current = current.getNextException()) {
      if (current instanceof SQLTimeoutException
          || "57014".equals(current.getSQLState())
          || (MYSQL_STATES.contains(current.getSQLState())
              && MYSQL_CANCELLED_CODES.contains(current.getErrorCode()))) {
        return true;
      }
    }
    return false;
  }

  public static boolean isTransient(SQLException e) {
    return classify(e) == Kind.TRANSIENT;
  }

  /**
   * The store exception for {@code e}, by its kind: unavailable (retry later), data (dead-letter)
   * or other (an operator has to act).
   *
   * @param what what failed, such as {@code Dedup store claim on table consumer_dedup}
   */
  public static DedupStoreException storeException(
      String what, @Nullable DedupKey key, SQLException e) {
    String reason = what + " failed: " + e.getMessage() + " (SQL state " + e.getSQLState() + ")";
    return switch (classify(e)) {
      case TRANSIENT -> new DedupStoreUnavailableException(reason, key, null, e);
      case DATA -> new DedupStoreDataException(reason, key, null, e);
      case OTHER -> new DedupStoreException(reason, key, null, e);
    };
  }

  /**
   * The refusal of a configuration when {@code failure} (a store call's, with its causes) is the
   * driver's refusal of the JDBC URL, and otherwise null. A database that is down answers nothing;
   * a URL that no driver accepts ({@code jdbc:postgres:} for {@code jdbc:postgresql:}, or the
   * driver's jar left out) is answered at once, and the same way at every try. Both reach a store
   * call as a connection that could not be had (SQL state 08001, or a pool's {@code
   * RuntimeException}), and taken for an outage the URL left every record waiting for good, with
   * WARN lines that named no mistake.
   */
  public static @Nullable DedupConfigurationException noDriverAccepts(Throwable failure) {
    boolean refused = false;
    String url = null;
    Throwable cause = failure;
    for (int depth = 0; cause != null && depth < MAX_CAUSES; depth++, cause = cause.getCause()) {
      String message = messageOf(cause);
      if (message == null) {
        continue;
      }
      // java.sql.DriverManager's answer when no registered driver accepts the URL, as pools and
      // Spring's DataSources pass it on; and HikariCP's, when the driver it was told to load says
      // the URL is not its own.
      refused |=
          cause instanceof SQLException && message.startsWith("No suitable driver")
              || message.contains("claims to not accept jdbcUrl")
              || unreadable(cause, message);
      Matcher named = JDBC_URL.matcher(message);
      if (url == null && named.find()) {
        url = shown(message.substring(named.start()));
      }
    }
    if (!refused) {
      return null;
    }
    return new DedupConfigurationException(
        "No JDBC driver accepts the URL of the dedup table's DataSource"
            + (url == null
                ? ""
                : ", " + url + " (the rest of it is not shown: it may hold a password)")
            + ": spell it as its driver does (jdbc:postgresql://host:5432/database,"
            + " jdbc:mariadb://..., jdbc:mysql://...; for PostgreSQL the user and password as"
            + " parameters, a '%' in them written %25) and put the driver's jar on the class path."
            + " This is not an outage that records could wait out: no try would ever connect",
        null,
        null);
  }

  /**
   * Whether {@code cause} is PostgreSQL's driver refusing a {@code jdbc:postgresql:} URL it takes
   * for its own but cannot read (a bare '%' in a parameter, a port that is no number or out of
   * range): SQL state 99999 with the whole URL, password included, in its message; or the host name
   * it could not look up holding an '@', a user name and password written before the host, which
   * that driver reads as part of the host name. Either is answered the same way at every try; taken
   * for an outage or a store failure, its message was logged as it stood.
   */
  private static boolean unreadable(Throwable cause, String message) {
    return cause instanceof SQLException sql
            && (message.startsWith("Unable to parse URL")
                || ("99999".equals(sql.getSQLState()) && message.contains("jdbc:postgresql:")))
        || cause instanceof UnknownHostException && message.indexOf('@') >= 0;
  }

  /**
   * What of the JDBC URL that {@code text} starts with cannot hold a password: its scheme, and its
   * host and port when nothing in the rest of the line could make them a user name and password.
   * Masking the password by pattern missed a form at each try (a user name holding '@', a password
   * holding '&', a {@code pwd=} parameter, MySQL's {@code (host=..,password=..)}), and drivers take
   * more forms than a pattern can know: the rest of the URL is left out.
   */
  private static String shown(String text) {
    Matcher line = LINE_END.matcher(text);
    String rest = line.find() ? text.substring(0, line.start()) : text;
    Matcher scheme = SCHEME.matcher(rest);
    if (!scheme.lookingAt()) {
      return "jdbc:";
    }
    // Any '@' (a user name's, a password's, or one in a parameter) leaves it unsure where the
    // authority's user name and password end and the host begins.
    if (!scheme.group().endsWith("//") || rest.indexOf('@') >= 0) {
      return scheme.group();
    }
    Matcher host = HOST.matcher(rest).region(scheme.end(), rest.length());
    return host.lookingAt() ? scheme.group() + host.group() : scheme.group();
  }

  /**
   * What a store call reports when {@code failure}, a DataSource's refusal of a connection, says
   * that no driver accepts its URL ({@link #noDriverAccepts}): an operator has to act, and the
   * record waits until the URL is set right; null for any other failure. Taken for an outage, the
   * call was tried for its whole retry budget, each try logged with the URL and its password, and
   * nothing named the mistake. The driver's own message, which may carry the password, is left out.
   */
  public static @Nullable DedupStoreException noDriver(
      String what, @Nullable DedupKey key, Throwable failure) {
    DedupConfigurationException refused = noDriverAccepts(failure);
    return refused == null
        ? null
        : new DedupStoreException(what + " failed: " + refused.getMessage(), key, null, refused);
  }

  /**
   * A message that cannot be read says nothing of a refusal: thrown on, it stopped the build that
   * an outage does not stop.
   */
  private static @Nullable String messageOf(Throwable cause) {
    try {
      return cause.getMessage();
    } catch (RuntimeException e) {
      return null;
    }
  }

  /**
   * What the store reports when a DataSource throws a {@code RuntimeException} where JDBC says
   * {@code SQLException} (Spring's {@code AbstractRoutingDataSource} on a thread without a lookup
   * key, a pool behind a circuit breaker that is open, a pool that cannot start): the table did not
   * answer, as when the database refuses. Passed on as it came, it was taken for the handler's
   * failure ({@code Disposition.HANDLER_FAILED}: attempts counted, the record dead-lettered, though
   * the handler never ran), and it reached the Actuator endpoint as a bare 500 (as a 400, blaming
   * the request, when an {@code IllegalArgumentException}).
   */
  public static DedupStoreUnavailableException noConnection(
      String what, @Nullable DedupKey key, RuntimeException e) {
    return new DedupStoreUnavailableException(
        what + " failed: the DataSource gave no connection: " + FailureTexts.describe(e),
        key,
        null,
        e);
  }
}
