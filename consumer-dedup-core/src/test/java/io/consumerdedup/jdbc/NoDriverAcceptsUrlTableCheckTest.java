package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.testing.ConnectionSource;
import io.consumerdedup.testing.StoreFixture;
import io.consumerdedup.testing.TestDatabase;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.List;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The table checks a health probe runs ({@link JdbcDedupStore#missingColumnsNow()}, {@link
 * JdbcDedupStore#missingPrivilegesNow()}) over a DataSource whose URL no driver accepts any more:
 * the probe reports the exception's message as its DOWN reason, and may log the exception, so
 * neither the message nor anything the exception carries may hold the password.
 */
class NoDriverAcceptsUrlTableCheckTest {
  @RegisterExtension static final StoreFixture fixture = new StoreFixture("nodriver_check", 1);

  @Test
  void theTableChecksNameTheRefusedUrlWithItsPasswordMasked() {
    String goodUrl = TestDatabase.url(fixture.schema());
    String[] url = {goodUrl};
    ConnectionSource driverManager =
        new ConnectionSource() {
          @Override
          public Connection getConnection() throws SQLException {
            return DriverManager.getConnection(url[0]);
          }
        };
    JdbcDedupStore store = JdbcDedupStore.builder(driverManager).build();
    assertThat(store.missingColumnsNow()).as("columns missing while the URL is right").isEmpty();
    url[0] = goodUrl.replace("jdbc:postgresql:", "jdbc:postgres:") + "&password=hunter2";

    List<Supplier<List<String>>> checks =
        List.of(store::missingColumnsNow, store::missingPrivilegesNow);
    for (Supplier<List<String>> check : checks) {
      Throwable thrown = catchThrowable(check::get);

      assertThat(thrown)
          .as("what the table check threw")
          .isInstanceOf(DedupStoreException.class)
          .isNotInstanceOf(DedupStoreUnavailableException.class)
          .hasMessageContaining("No JDBC driver accepts the URL of the dedup table's DataSource")
          .hasMessageContaining("(the rest of it is not shown: it may hold a password)");
      StringWriter printed = new StringWriter();
      thrown.printStackTrace(new PrintWriter(printed));
      assertThat(printed.toString())
          .as("the exception as a log prints it, causes included")
          .doesNotContain("hunter2");
    }
  }
}
