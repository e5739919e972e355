package io.consumerdedup.jdbc.internal;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.DedupTableMissingException;
import io.consumerdedup.core.internal.FailureTexts;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;

/**
 * Checks that the dedup table exists with every column the store uses, so that a forgotten
 * migration fails an application at start-up instead of every record at run time; the error names
 * what is missing and how to create it in the database's dialect.
 */
public final class TableCheck {
  /**
   * The columns the store's statements need each privilege on: it reads and inserts every column,
   * and updates all but the key and created_at.
   */
  private static final List<String> UPDATED_COLUMNS =
      PostgresSql.EXPECTED_COLUMNS.stream()
          .filter(column -> !List.of("biz_type", "biz_key", "created_at").contains(column))
          .toList();

  private static final Map<String, List<String>> COLUMNS_BY_PRIVILEGE =
      Map.of(
          "SELECT",
          PostgresSql.EXPECTED_COLUMNS,
          "INSERT",
          PostgresSql.EXPECTED_COLUMNS,
          "UPDATE",
          UPDATED_COLUMNS);

  private static final String OPERATION = "table check";

  /** The most schemas the error of a table found only in other schemas names. */
  private static final int MAX_SCHEMAS_NAMED = 3;

  private final StoreCalls calls;
  private final String table;
  private final Logger log;

  /** A table's storage advice is logged once, not at every executor built over it. */
  private final AtomicBoolean advised = new AtomicBoolean();

  /**
   * @param log where a check that cannot reach the database says so (the store's logger)
   */
  public TableCheck(StoreCalls calls, String table, Logger log) {
    this.calls = calls;
    this.table = table;
    this.log = log;
  }

  /**
   * Checks the table, with the retries of a store call.
   *
   * @throws DedupTableMissingException the table is missing or lacks columns
   * @throws DedupStoreException the database could not be asked
   */
  public void verify() {
    checked(calls.run(OPERATION, null, this::read));
  }

  /**
   * Checks the table in one try; a database that cannot be asked now is only logged.
   *
   * @throws DedupTableMissingException the table is missing or lacks columns
   * @throws DedupConfigurationException no driver accepts the DataSource's JDBC URL
   */
  public void verifyIfReachable() {
    Columns columns;
    try {
      columns = calls.runOnce(OPERATION, null, this::read);
    } catch (DedupStoreUnavailableException e) {
      DedupConfigurationException refused = SqlStates.noDriverAccepts(e);
      if (refused != null) {
        throw refused;
      }
      log.warn(
          "Could not check the dedup table {} now; records wait until the database answers: {}",
          table,
          e.getMessage());
      return;
    } catch (DedupStoreException e) {
      if (e.getCause() instanceof DedupConfigurationException refused) {
        throw refused; // no driver accepts the URL (StoreCalls)
      }
      log.warn("Could not check the dedup table {}: {}", table, e.getMessage());
      return;
    }
    checked(columns);
    warnIfPrivilegesMissing();
    warnIfReadOnly();
  }

  /**
   * Warns of a database that takes no writes: a hot standby or a replica's reader endpoint, where
   * the table and the privileges all look right and every claim is then refused (25006) and waited
   * on, a WARN at each back-off, with nothing saying why. A warning, not a refusal: during a
   * failover the same endpoint turns writable within moments, and a refusal would stop an
   * application that would have run once it did.
   */
  private void warnIfReadOnly() {
    String readOnly;
    try {
      readOnly =
          calls.runOnce(
              OPERATION,
              null,
              (connection, dialect) -> {
                if (!(dialect instanceof PostgresDialect)) {
                  return "";
                }
                try (PreparedStatement statement =
                        calls.prepare(
                            connection,
                            "SELECT pg_is_in_recovery(), current_setting('transaction_read_only')");
                    ResultSet result = statement.executeQuery()) {
                  result.next();
                  if (result.getBoolean(1)) {
                    return "a hot standby (pg_is_in_recovery() is true)";
                  }
                  return "on".equals(result.getString(2))
                      ? "read-only (transaction_read_only is on)"
                      : "";
                }
              });
    } catch (DedupStoreException e) {
      log.debug("Could not ask whether the dedup table {} takes writes: {}", table, e.getMessage());
      return;
    }
    if (!readOnly.isEmpty()) {
      log.warn(
          "The DataSource of the dedup table {} connects to a database that is {}: every claim is"
              + " refused and its record waits, retried at each back-off, until it takes writes."
              + " Point the DataSource at the primary (a cluster's writer endpoint, not a reader"
              + " or replica one)",
          table,
          readOnly);
    }
  }

  /**
   * Warns of the privileges the role lacks. The catalog shows every column to a role granted SELECT
   * alone, so the column check passes such a role, and each claim is then refused at its record
   * with a "permission denied" that names neither the privilege nor the fix. Asked of PostgreSQL's
   * privilege functions, which take no lock: statements that touch the table wait behind a lock
   * another transaction holds on it, and the executor's build with them.
   */
  private void warnIfPrivilegesMissing() {
    List<String> missing;
    try {
      missing =
          calls.runOnce(
              OPERATION,
              null,
              (connection, dialect) -> {
                List<String> lacked = new ArrayList<>();
                if (!(dialect instanceof PostgresDialect)) {
                  return lacked;
                }
                for (String privilege : List.of("SELECT", "INSERT", "UPDATE", "DELETE")) {
                  String lacking = lacking(connection, privilege);
                  if (lacking != null) {
                    lacked.add(lacking);
                  }
                }
                return lacked;
              });
    } catch (DedupStoreException e) {
      log.debug("Could not check the privileges on the dedup table {}: {}", table, e.getMessage());
      return;
    }
    if (!missing.isEmpty()) {
      log.warn(
          "The DataSource's role lacks {} on the dedup table {}: the database refuses the store's"
              + " claims or their outcomes, and records wait, an ERROR at each try, until granted:"
              + " GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO <the role the DataSource connects"
              + " as>",
          String.join(", ", missing),
          table,
          table);
    }
  }

  /**
   * The privilege as lacked ({@code "UPDATE"}, or {@code "UPDATE (of claim_id)"} when only some
   * columns the store writes are granted), or null. A role may hold SELECT, INSERT and UPDATE
   * column by column, for which the table privilege answers false though every statement runs (a
   * grant that keeps the key columns from being updated): those are asked of each column.
   */
  private @Nullable String lacking(Connection connection, String privilege) throws SQLException {
    if (tablePrivilege(connection, privilege)) {
      return null;
    }
    List<String> columns = COLUMNS_BY_PRIVILEGE.get(privilege);
    if (columns == null) {
      return privilege; // DELETE: granted on the whole table only
    }
    List<String> ungranted = new ArrayList<>();
    try (PreparedStatement statement =
        calls.prepare(
            connection,
            "SELECT c FROM unnest(?::text[]) WITH ORDINALITY AS u(c, n)"
                + " WHERE NOT has_column_privilege(?, c, ?) ORDER BY n")) {
      statement.setArray(1, connection.createArrayOf("text", columns.toArray()));
      statement.setString(2, table);
      statement.setString(3, privilege);
      try (ResultSet rows = statement.executeQuery()) {
        while (rows.next()) {
          ungranted.add(rows.getString(1));
        }
      }
    }
    if (ungranted.isEmpty()) {
      return null;
    }
    return ungranted.size() == columns.size()
        ? privilege
        : privilege + " (of " + String.join(", ", ungranted) + ")";
  }

  private boolean tablePrivilege(Connection connection, String privilege) throws SQLException {
    try (PreparedStatement statement =
        calls.prepare(connection, "SELECT has_table_privilege(?, ?)")) {
      statement.setString(1, table);
      statement.setString(2, privilege);
      try (ResultSet row = statement.executeQuery()) {
        return !row.next() || row.getBoolean(1);
      }
    }
  }

  /** The columns the store needs that the table lacks, with the retries of a store call. */
  public List<String> missingColumns() {
    return calls.run(OPERATION, null, this::read).missing();
  }

  /**
   * The columns the store needs that the table lacks, in one try.
   *
   * @throws DedupStoreUnavailableException the database cannot be reached now
   * @throws DedupStoreException the database could not be asked
   */
  public List<String> missingColumnsNow() {
    return calls.runOnce(OPERATION, null, this::read).missing();
  }

  /**
   * The privileges on the table the store needs that the connection's role lacks, in one try: a
   * statement of each kind the store runs, matching no row, and refused only for a privilege. The
   * insert takes its row from a derived table, so that it does not need SELECT on the table too.
   *
   * @throws DedupStoreUnavailableException the database cannot be reached now
   * @throws DedupStoreException the database could not be asked
   */
  public List<String> missingPrivilegesNow() {
    // Each column the store reads, inserts or updates named: a role granted column by column was
    // found granted by a statement naming one column, and every claim of it was then refused.
    List<String> inserted = PostgresSql.EXPECTED_COLUMNS;
    Map<String, String> probes = new LinkedHashMap<>();
    probes.put(
        "SELECT",
        "SELECT "
            + String.join(", ", PostgresSql.EXPECTED_COLUMNS)
            + " FROM "
            + table
            + " WHERE 1 = 0");
    // Every column without a default named: MySQL's strict mode refuses the statement otherwise,
    // rows or none.
    probes.put(
        "INSERT",
        "INSERT INTO "
            + table
            + " ("
            + String.join(", ", inserted)
            + ") SELECT "
            + String.join(", ", Collections.nCopies(inserted.size(), "NULL"))
            + " FROM (SELECT 1) AS n WHERE 1 = 0");
    probes.put(
        "UPDATE",
        "UPDATE "
            + table
            + " SET "
            + UPDATED_COLUMNS.stream()
                .map(column -> column + " = " + column)
                .collect(Collectors.joining(", "))
            + " WHERE 1 = 0");
    probes.put("DELETE", "DELETE FROM " + table + " WHERE 1 = 0");
    return calls.runOnce(
        OPERATION,
        null,
        (connection, dialect) -> {
          List<String> missing = new ArrayList<>();
          for (Map.Entry<String, String> probe : probes.entrySet()) {
            try (PreparedStatement statement = calls.prepare(connection, probe.getValue())) {
              statement.execute();
            } catch (SQLException e) {
              if (!SqlStates.isPermissionDenied(e)) {
                throw e;
              }
              missing.add(probe.getKey());
            }
          }
          return missing;
        });
  }

  private void checked(Columns columns) {
    throwIfMissing(columns);
    String advice = columns.storageAdvice();
    if (advice != null && advised.compareAndSet(false, true)) {
      log.warn(advice);
    }
  }

  private void throwIfMissing(Columns columns) {
    List<String> missing = columns.missing();
    if (missing.isEmpty()) {
      return;
    }
    boolean absent = missing.size() == PostgresSql.EXPECTED_COLUMNS.size();
    Dialect dialect = columns.dialect();
    String create =
        "the schema file "
            + dialect.schemaResource()
            + " (in the consumer-dedup-schema jar, Flyway naming: copy it into your migrations), for"
            + " example: unzip -p consumer-dedup-schema-<version>.jar "
            + dialect.schemaResource()
            + " | "
            + dialect.schemaClient();
    if (!absent) {
      throw new DedupTableMissingException(
          table,
          missing,
          false,
          "The dedup table "
              + table
              + " lacks the column(s) "
              + String.join(", ", missing)
              + " (it was created from an older schema file)",
          "Create it from "
              + create
              + "; for claim_id: ALTER TABLE "
              + table
              + " ADD COLUMN claim_id "
              + dialect.claimIdColumnType());
    }
    String createdAtStartup =
        "; with Spring Boot, consumer-dedup.initialize-schema=always creates it at start-up";
    List<String> elsewhere = columns.elsewhere();
    if (elsewhere.isEmpty()) {
      throw new DedupTableMissingException(
          table,
          missing,
          true,
          "The dedup table " + table + " does not exist",
          "Create it from " + create + createdAtStartup);
    }
    // A table made under another schema (psql run as another role; on MySQL, the mysql client on
    // another database) looks absent: creating one again would split the keys between two
    // tables, so the likelier fix comes first.
    String unqualified = table.substring(table.lastIndexOf('.') + 1);
    List<String> named =
        elsewhere.size() > MAX_SCHEMAS_NAMED ? elsewhere.subList(0, MAX_SCHEMAS_NAMED) : elsewhere;
    String qualified = named.get(0) + "." + unqualified;
    throw new DedupTableMissingException(
        table,
        missing,
        true,
        "The dedup table "
            + table
            + " does not exist where the connection looks for it, but "
            + dialect.schemaWord()
            + (elsewhere.size() == 1 ? " " : "s ")
            + String.join(", ", named)
            + (elsewhere.size() > named.size()
                ? " (and " + (elsewhere.size() - named.size()) + " more)"
                : "")
            + (elsewhere.size() == 1 ? " has a table " : " have a table ")
            + unqualified,
        "If that is this application's dedup table, name it with its "
            + dialect.schemaWord()
            + ": consumer-dedup.table-name="
            + qualified
            + " with Spring Boot, JdbcDedupStore.builder(dataSource).tableName(\""
            + qualified
            + "\") without. Otherwise create this application's table from "
            + create
            + createdAtStartup);
  }

  private Columns read(Connection connection, Dialect dialect) throws SQLException {
    Set<String> present = dialect.columns(connection);
    if (present.isEmpty()) {
      return new Columns(present, dialect, null, schemasHoldingTable(connection, dialect));
    }
    return new Columns(present, dialect, storageAdvice(connection, dialect), List.of());
  }

  /** Advice only, as {@link #storageAdvice} is: a database that does not tell gives none. */
  private List<String> schemasHoldingTable(Connection connection, Dialect dialect) {
    try {
      return dialect.schemasHoldingTable(connection);
    } catch (SQLException | RuntimeException e) {
      log.debug(
          "Could not look for the dedup table {} in other schemas: {}",
          table,
          FailureTexts.describe(e));
      return List.of();
    }
  }

  /**
   * Advice only: a database that does not tell (a role denied {@code pg_class}, as some hosts deny
   * ordinary roles) gives none. Thrown on, it failed the check it rides with: {@link #verify}
   * failed the start-up, and {@link #verifyIfReachable} skipped the columns it had read, so that a
   * table lacking one was found by every record instead.
   */
  private @Nullable String storageAdvice(Connection connection, Dialect dialect) {
    try {
      return dialect.storageAdvice(connection);
    } catch (SQLException | RuntimeException e) {
      log.debug(
          "Could not read the storage options of the dedup table {}: {}",
          table,
          FailureTexts.describe(e));
      return null;
    }
  }

  /**
   * The columns a table has, in the dialect that read them, what to change in its storage, and the
   * other schemas with a table of its name when it has none.
   */
  private record Columns(
      Set<String> present,
      Dialect dialect,
      @Nullable String storageAdvice,
      List<String> elsewhere) {

    /** The columns the store needs that are not present, in the schema file's order. */
    List<String> missing() {
      return PostgresSql.EXPECTED_COLUMNS.stream()
          .filter(column -> !present.contains(column))
          .toList();
    }
  }
}
