package io.consumerdedup.core;

import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.ConnectionSource;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.time.Duration;

/**
 * Runs in a child JVM: claims a key with a short lease and blocks inside its handler until the
 * parent kills the process. Prints {@code HANDLER-STARTED} once the claim is committed.
 */
public final class ChildClaimer {
  private ChildClaimer() {}

  public static void main(String[] args) throws Exception {
    String url = args[0];
    DedupKey key = DedupKey.of(args[1], args[2]);
    Duration lease = Duration.ofMillis(Long.parseLong(args[3]));
    // Any database the store speaks to, by the URL's driver.
    ConnectionSource dataSource =
        new ConnectionSource() {
          @Override
          public Connection getConnection() throws SQLException {
            return DriverManager.getConnection(url);
          }
        };
    IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build())
            .ownerId("child-" + ProcessHandle.current().pid())
            .lease(lease)
            .build();
    executor.execute(
        key,
        () -> {
          System.out.println("HANDLER-STARTED " + ProcessHandle.current().pid());
          System.out.flush();
          Thread.sleep(Long.MAX_VALUE);
          return null;
        });
  }
}
