package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestMariaDb;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.Map;
import org.assertj.core.api.InstanceOfAssertFactories;
import org.junit.jupiter.api.Test;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.Status;

/**
 * The application's database role was granted SELECT alone on the dedup table (the migration ran as
 * another role, and its GRANT named too little): every claim is refused, and every record held for
 * it. The catalog shows every column to such a role, so a check of the columns alone found the
 * table complete and the health UP, though docs/operations.md promises DOWN. Real roles and
 * accounts, on PostgreSQL and MariaDB.
 */
class HealthMissingPrivilegeTest {

  @Test
  void aRoleGrantedSelectAloneIsDownNamingThePrivilegesItLacksAndUpOnceGranted()
      throws SQLException {
    String schema = TestDatabase.newSchema("healthprivilege");
    String role = schema + "_app";
    String owner = TestDatabase.baseUrl();
    run(
        owner,
        "CREATE ROLE " + role + " LOGIN",
        "GRANT USAGE ON SCHEMA " + schema + " TO " + role,
        "GRANT SELECT ON " + schema + ".consumer_dedup TO " + role);
    try (HikariDataSource application =
        pool(TestDatabase.url(schema).replaceAll("user=[^&]*", "user=" + role))) {
      downUntilGranted(
          application,
          "permission denied",
          () ->
              run(
                  owner,
                  "GRANT INSERT, UPDATE, DELETE ON " + schema + ".consumer_dedup TO " + role));
    } finally {
      TestDatabase.dropSchema(schema);
      run(owner, "DROP ROLE IF EXISTS " + role);
    }
  }

  @Test
  void anAccountGrantedSelectAloneIsDownNamingThePrivilegesItLacksOnMariaDb() throws SQLException {
    String database = TestMariaDb.newDatabase("healthprivilege");
    String account = "'" + database + "'@'%'";
    String owner = TestMariaDb.baseUrl();
    run(
        owner,
        "CREATE USER " + account + " IDENTIFIED BY 'app-password'",
        "GRANT SELECT ON " + database + ".consumer_dedup TO " + account);
    String url =
        TestMariaDb.url(database, TestMariaDb.Driver.MARIADB)
            .replaceAll("user=[^&]*", "user=" + database + "&password=app-password");
    try (HikariDataSource application = pool(url)) {
      downUntilGranted(
          application,
          "command denied",
          () ->
              run(
                  owner,
                  "GRANT INSERT, UPDATE, DELETE ON " + database + ".consumer_dedup TO " + account));
    } finally {
      TestMariaDb.dropDatabase(database);
      run(owner, "DROP USER IF EXISTS " + account);
    }
  }

  /** A claim is refused for a privilege; the health is DOWN naming them, and UP once granted. */
  private static void downUntilGranted(
      HikariDataSource application, String refusal, SqlAction grant) throws SQLException {
    JdbcDedupStore store = JdbcDedupStore.builder(application).build();
    ConsumerDedupHealthIndicator health = new ConsumerDedupHealthIndicator(store);

    Throwable claim =
        catchThrowable(
            () ->
                store.claim(
                    new ClaimRequest(
                        DedupKey.of("payment", "ORD-1"),
                        "app",
                        Duration.ofSeconds(30),
                        Duration.ofDays(1),
                        null,
                        "orders-0@0")));
    assertThat(claim)
        .as("a claim by the application's role")
        .isInstanceOf(DedupStoreException.class)
        .hasMessageContaining(refusal);

    Health refused = health.health();
    assertThat(refused.getStatus())
        .as("health while every claim is refused for a missing privilege (%s)", refused)
        .isEqualTo(Status.DOWN);
    Map<String, Object> details = refused.getDetails();
    assertThat(details.get("missingPrivileges"))
        .asInstanceOf(InstanceOfAssertFactories.LIST)
        .containsExactly("INSERT", "UPDATE", "DELETE");
    assertThat(String.valueOf(details.get("reason"))).contains("GRANT").contains("consumer_dedup");

    grant.run();
    Health granted = health.health();
    assertThat(granted.getStatus()).as("health once granted (%s)", granted).isEqualTo(Status.UP);
  }

  @FunctionalInterface
  private interface SqlAction {
    void run() throws SQLException;
  }

  private static HikariDataSource pool(String url) {
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(url);
    config.setMaximumPoolSize(2);
    return new HikariDataSource(config);
  }

  /** Runs {@code statements} as the server's owner account, {@code ownerUrl}. */
  private static void run(String ownerUrl, String... statements) throws SQLException {
    try (Connection connection = DriverManager.getConnection(ownerUrl);
        Statement statement = connection.createStatement()) {
      for (String sql : statements) {
        statement.execute(sql);
      }
    }
  }
}
