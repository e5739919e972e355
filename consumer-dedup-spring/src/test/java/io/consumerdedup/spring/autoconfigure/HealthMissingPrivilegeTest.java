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
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.Map;
import org.assertj.core.api.InstanceOfAssertFactories;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.Status;

/**
 * The application's database role was granted SELECT alone on the dedup table (the migration ran as
 * another role, and its GRANT named too little): every claim is refused, and every record held for
 * it. The catalog shows every column to such a role, so a check of the columns alone found the
 * table complete and the health UP, though docs/operations.md promises DOWN. Real PostgreSQL roles.
 */
class HealthMissingPrivilegeTest {
  private String schema;
  private String role;
  private HikariDataSource application;

  @BeforeEach
  void setUp() throws SQLException {
    schema = TestDatabase.newSchema("healthprivilege");
    role = schema + "_app";
    owner(
        "CREATE ROLE " + role + " LOGIN",
        "GRANT USAGE ON SCHEMA " + schema + " TO " + role,
        "GRANT SELECT ON " + schema + ".consumer_dedup TO " + role);
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(TestDatabase.url(schema).replaceAll("user=[^&]*", "user=" + role));
    config.setMaximumPoolSize(2);
    application = new HikariDataSource(config);
  }

  @AfterEach
  void tearDown() throws SQLException {
    application.close();
    TestDatabase.dropSchema(schema);
    owner("DROP ROLE IF EXISTS " + role);
  }

  @Test
  void aRoleGrantedSelectAloneIsDownNamingThePrivilegesItLacksAndUpOnceGranted()
      throws SQLException {
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
        .hasMessageContaining("permission denied");

    Health refused = health.health();
    assertThat(refused.getStatus())
        .as("health while every claim is refused for a missing privilege (%s)", refused)
        .isEqualTo(Status.DOWN);
    Map<String, Object> details = refused.getDetails();
    assertThat(details.get("missingPrivileges"))
        .asInstanceOf(InstanceOfAssertFactories.LIST)
        .containsExactly("INSERT", "UPDATE", "DELETE");
    assertThat(String.valueOf(details.get("reason"))).contains("GRANT").contains("consumer_dedup");

    owner("GRANT INSERT, UPDATE, DELETE ON " + schema + ".consumer_dedup TO " + role);
    assertThat(health.health().getStatus()).as("health once granted").isEqualTo(Status.UP);
  }

  /** Runs {@code statements} as the database's owner. */
  private void owner(String... statements) throws SQLException {
    try (Connection connection = java.sql.DriverManager.getConnection(TestDatabase.baseUrl());
        Statement statement = connection.createStatement()) {
      for (String sql : statements) {
        statement.execute(sql);
      }
    }
  }
}
