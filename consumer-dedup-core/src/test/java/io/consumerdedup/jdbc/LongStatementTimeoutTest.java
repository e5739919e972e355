package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import java.time.Duration;
import java.util.UUID;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * A statement timeout long enough to mean "no timeout" (two weeks, a year, a century) is what the
 * builder takes: the connection's network timeout of twice it, in milliseconds, and the query
 * timeout in seconds saturate at the largest the driver takes rather than wrapping around to a
 * negative number, which the driver refused (PostgreSQL: SQL state 22023, taken for data the
 * database refused, so every valid record was dead-lettered; MySQL: S1009, so every record waited).
 * MySQL Connector/J counts the query timeout in milliseconds, in an int: from about 24.8 days it
 * wrapped around, negative at 30 days and at the cap of {@code Integer.MAX_VALUE} seconds (its
 * cancel timer refused the negative delay on every statement), to about 17 days at a year.
 */
class LongStatementTimeoutTest {
  @RegisterExtension static final TwoDatabases databases = new TwoDatabases("long_timeout");

  @ParameterizedTest(name = "{0}, {1} days")
  @CsvSource({
    "postgres, 14",
    "postgres, 365",
    "postgres, 36500",
    "mariadb, 14",
    "mariadb, 365",
    "mariadb, 36500",
    "mysql, 14",
    "mysql, 30",
    "mysql, 365",
    "mysql, 36500"
  })
  void aStatementTimeoutOfWeeksOrYearsClaimsAndCompletes(String database, long days) {
    JdbcDedupStore store =
        JdbcDedupStore.builder(databases.dataSource(database))
            .statementTimeout(Duration.ofDays(days))
            .build();
    DedupKey key = DedupKey.of("long-timeout", UUID.randomUUID().toString());

    ClaimResult claim =
        store.claim(
            new ClaimRequest(
                key, "consumer-a", Duration.ofMinutes(1), Duration.ofDays(1), null, null));

    assertThat(claim).as("the claim of a new key").isInstanceOf(ClaimResult.Claimed.class);
    assertThat(store.complete((ClaimResult.Claimed) claim, Duration.ofDays(1)))
        .as("its SUCCESS written")
        .isTrue();
    assertThat(store.find(key).orElseThrow().status()).isEqualTo(DedupStatus.SUCCESS);
  }
}
