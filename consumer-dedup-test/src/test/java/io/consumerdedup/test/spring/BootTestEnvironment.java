package io.consumerdedup.test.spring;

import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import org.springframework.test.context.DynamicPropertyRegistry;

/** What the Spring Boot applications of this package's tests start on. */
final class BootTestEnvironment {
  private BootTestEnvironment() {}

  /**
   * A schema of the test class's own for the dedup table, the broker with {@code topics} of one
   * partition each, consumers reading from the start, and no janitor.
   *
   * @return the schema, for the class to drop after its tests
   */
  static String register(DynamicPropertyRegistry registry, String schemaPrefix, String... topics) {
    String schema = TestDatabase.newSchema(schemaPrefix);
    registry.add("spring.datasource.url", () -> TestDatabase.url(schema));
    TestKafka.createTopics(1, topics);
    registry.add("spring.kafka.bootstrap-servers", TestKafka::bootstrapServers);
    registry.add("spring.kafka.consumer.auto-offset-reset", () -> "earliest");
    registry.add("consumer-dedup.cleanup.enabled", () -> "false");
    return schema;
  }
}
