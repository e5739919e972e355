package io.consumerdedup.faults;

/**
 * Where a scenario runs: the database behind the dedup table, and the consumer in the child JVMs
 * (the kafka-clients poll loop of {@link FaultConsumer}, or the Spring Boot {@code @Idempotent}
 * listener of {@link SpringFaultConsumer}). Both consumers take the same arguments, so a scenario
 * written once runs on every target it applies to; the report tells the targets apart by the
 * scenario's name.
 */
enum Target {
  PLAIN(FaultDatabase.POSTGRES, FaultConsumer.class, ""),
  SPRING(FaultDatabase.POSTGRES, SpringFaultConsumer.class, ", Spring"),
  MARIADB(FaultDatabase.MARIADB, FaultConsumer.class, ", MariaDB");

  final FaultDatabase database;
  final Class<?> consumerMain;
  private final String suffix;

  Target(FaultDatabase database, Class<?> consumerMain, String suffix) {
    this.database = database;
    this.consumerMain = consumerMain;
    this.suffix = suffix;
  }

  String scenarioName(String name) {
    return name + suffix;
  }

  boolean spring() {
    return this == SPRING;
  }
}
