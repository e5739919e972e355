package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.jdbc.JdbcDedupStore;
import java.sql.SQLException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.jspecify.annotations.Nullable;
import org.springframework.beans.factory.InitializingBean;

/**
 * Checks at start-up that the dedup table exists with every column the store uses (after {@code
 * consumer-dedup.initialize-schema=always} had its chance to create it): a forgotten migration
 * stops the application with the fix, instead of failing every record, and so does a database the
 * store does not support (H2, say), and a JDBC URL that no driver accepts. A database that cannot
 * be reached at start-up is only logged: records wait for it like for any outage.
 */
public final class DedupTableVerifier implements InitializingBean {

  private static final Pattern JDBC_URL = Pattern.compile("jdbc:[^\\s,;()]+");
  private static final Pattern PASSWORD = Pattern.compile("((?i)password=)[^&;]*");

  /** How deep the causes of a failed connection are searched for the driver's answer. */
  private static final int MAX_CAUSES = 16;

  private final JdbcDedupStore store;

  /**
   * @param initializer the schema initializer, if any: taken so that it runs first
   */
  public DedupTableVerifier(JdbcDedupStore store, @Nullable Object initializer) {
    this.store = store;
  }

  @Override
  public void afterPropertiesSet() {
    refuseUrlNoDriverAccepts();
    // The check itself is the core's, for every dialect; an unreachable database is only logged.
    store.verifyReady();
  }

  /**
   * A database that is down answers nothing; a URL that no driver accepts is answered at once, and
   * the same way at every try. Taken for an outage, it left every record waiting for good, with
   * WARN lines that named no mistake.
   */
  private void refuseUrlNoDriverAccepts() {
    try {
      store.missingColumnsNow();
    } catch (RuntimeException e) {
      String answer = noDriverAccepts(e);
      if (answer != null) {
        throw new DedupConfigurationException(
            "No JDBC driver accepts the URL of the dedup table's DataSource"
                + (answer.isEmpty() ? "" : ", " + answer)
                + ": spell it as its driver does (jdbc:postgresql://host:5432/database,"
                + " jdbc:mariadb://..., jdbc:mysql://...) and put the driver's jar on the class"
                + " path. This is not an outage that records could wait out: no try would ever"
                + " connect",
            null,
            null);
      }
      // Anything else, an outage among it, is for the check below to log or refuse.
    }
  }

  /**
   * When {@code failure} is the driver's refusal of the URL, the URL if a cause names it (its
   * password masked) or else "", and otherwise null.
   */
  static @Nullable String noDriverAccepts(Throwable failure) {
    boolean refused = false;
    String url = null;
    Throwable cause = failure;
    for (int depth = 0; cause != null && depth < MAX_CAUSES; depth++, cause = cause.getCause()) {
      String message = cause.getMessage();
      if (message == null) {
        continue;
      }
      // java.sql.DriverManager's answer when no registered driver accepts the URL (a scheme spelt
      // otherwise, a driver's jar left out), as pools and Spring's DataSources pass it on; and
      // HikariCP's, when the driver it was told to load says the URL is not its own.
      refused |=
          cause instanceof SQLException && message.startsWith("No suitable driver")
              || message.contains("claims to not accept jdbcUrl");
      Matcher named = JDBC_URL.matcher(message);
      if (url == null && named.find()) {
        url = PASSWORD.matcher(named.group()).replaceAll("$1***");
      }
    }
    if (!refused) {
      return null;
    }
    return url == null ? "" : url;
  }
}
