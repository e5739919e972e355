package io.consumerdedup.examples;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.jspecify.annotations.Nullable;

/**
 * The demo's command line: flags win over environment variables; with neither, everything runs on
 * an embedded PostgreSQL and an in-JVM Kafka broker.
 *
 * @param bootstrapServers a real Kafka ({@code --kafka-bootstrap=} or {@code
 *     DEMO_KAFKA_BOOTSTRAP}), or null for the in-JVM broker
 * @param jdbcUrl a real PostgreSQL, with credentials ({@code --jdbc-url=} or {@code
 *     DEMO_JDBC_URL}), or null for the embedded one
 * @param only the scenario ids to run ({@code --only=lost-ack,zombie}); empty for all
 */
public record DemoOptions(
    @Nullable String bootstrapServers,
    @Nullable String jdbcUrl,
    boolean fast,
    List<String> only,
    boolean help) {

  public static final String KAFKA_VARIABLE = "DEMO_KAFKA_BOOTSTRAP";
  public static final String JDBC_VARIABLE = "DEMO_JDBC_URL";

  public static final String USAGE =
      """
      Usage: Demo [--kafka-bootstrap=HOST:PORT] [--jdbc-url=JDBC_URL] [--only=ID,...] [--fast]
        --kafka-bootstrap  a running Kafka (env DEMO_KAFKA_BOOTSTRAP); default: an in-JVM broker
        --jdbc-url         a running PostgreSQL, MySQL 8 or MariaDB 10.6+, with credentials, e.g.
                           jdbc:postgresql://localhost:5432/postgres?user=me&password=secret
                           jdbc:mariadb://localhost:3306/test?user=root
                           (env DEMO_JDBC_URL); default: an embedded PostgreSQL.
                           Each run creates a schema demo_* there and drops it afterwards.
        --only             run only these scenarios: lost-ack, producer-retry,
                           provider-callbacks, bank-timeout, zombie, fan-out,
                           spring, crash-mid-handler
        --fast             shorter leases and waits (as the smoke test uses)
      """;

  /**
   * Parses {@code args}; an argument may hold several options separated by spaces (Maven passes
   * {@code -Ddemo.args} as one).
   *
   * @throws IllegalArgumentException on an unknown option, naming it
   */
  public static DemoOptions parse(String[] args, Map<String, String> environment) {
    String kafka = blankToNull(environment.get(KAFKA_VARIABLE));
    String jdbc = blankToNull(environment.get(JDBC_VARIABLE));
    boolean fast = false;
    boolean help = false;
    List<String> only = new ArrayList<>();
    for (String arg : args) {
      for (String option : arg.trim().split("\\s+")) {
        if (option.isEmpty()) {
          continue;
        }
        if (option.startsWith("--kafka-bootstrap=")) {
          kafka = blankToNull(value(option));
        } else if (option.startsWith("--jdbc-url=")) {
          jdbc = blankToNull(value(option));
        } else if (option.startsWith("--only=")) {
          only.addAll(List.of(value(option).split(",")));
        } else if (option.equals("--fast")) {
          fast = true;
        } else if (option.equals("--help") || option.equals("-h")) {
          help = true;
        } else {
          throw new IllegalArgumentException("Unknown option '" + option + "'\n" + USAGE);
        }
      }
    }
    return new DemoOptions(kafka, jdbc, fast, List.copyOf(only), help);
  }

  private static String value(String option) {
    return option.substring(option.indexOf('=') + 1);
  }

  private static @Nullable String blankToNull(@Nullable String value) {
    return value == null || value.isBlank() ? null : value.trim();
  }
}
