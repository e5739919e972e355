package io.consumerdedup.core;

import java.util.List;

/**
 * The dedup table does not exist, or lacks columns the store uses (it was created from an older
 * schema file). Thrown by the JDBC store's start-up checks ({@code JdbcDedupStore.verifyTable()}
 * and {@code verifyReady()}), so that a forgotten migration stops an application at start-up. The
 * message is {@link #problem()} followed by {@link #fix()}.
 */
public final class DedupTableMissingException extends IllegalStateException {
  private static final long serialVersionUID = 1L;

  private final String table;
  private final List<String> missingColumns;
  private final boolean tableMissing;
  private final String problem;
  private final String fix;

  public DedupTableMissingException(
      String table, List<String> missingColumns, boolean tableMissing, String problem, String fix) {
    super(problem + ". " + fix);
    this.table = table;
    this.missingColumns = List.copyOf(missingColumns);
    this.tableMissing = tableMissing;
    this.problem = problem;
    this.fix = fix;
  }

  /** The table's name, as configured. */
  public String table() {
    return table;
  }

  /** The columns the store uses that the table lacks; all of them when there is no table. */
  public List<String> missingColumns() {
    return missingColumns;
  }

  /** Whether there is no such table at all. */
  public boolean tableMissing() {
    return tableMissing;
  }

  /** What is missing, such as {@code The dedup table consumer_dedup does not exist}. */
  public String problem() {
    return problem;
  }

  /** How to create the table or add the columns: the schema file, and the SQL to run. */
  public String fix() {
    return fix;
  }
}
