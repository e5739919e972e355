package io.consumerdedup.examples;

/**
 * What every scenario runs on.
 *
 * @param bootstrapServers the Kafka broker
 * @param jdbcUrl the PostgreSQL server, with credentials and without a schema
 */
public record DemoContext(
    String bootstrapServers, String jdbcUrl, DemoSettings settings, Progress progress) {}
