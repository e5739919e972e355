package io.consumerdedup.spring;

import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import io.consumerdedup.testing.TestShareGroups;
import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.DefaultShareConsumerFactory;
import org.springframework.test.context.DynamicPropertyRegistry;

/**
 * What the tests of {@code @Idempotent} share listeners (the {@code ShareListener*Test} classes of
 * both packages) build their applications with: share container factories over the in-JVM broker,
 * and, for those that need no {@code effects} table, the application's schema and topics.
 */
public final class ShareListenerTests {
  private ShareListenerTests() {}

  /**
   * The consumer configuration of a share container over the in-JVM broker, reading keys and values
   * with these deserializers; a new map, which the caller may add to.
   */
  @SuppressWarnings("rawtypes") // ErrorHandlingDeserializer is a raw Deserializer
  public static Map<String, Object> consumerConfig(
      Class<? extends Deserializer> keys, Class<? extends Deserializer> values) {
    Map<String, Object> config = new HashMap<>();
    config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, TestKafka.bootstrapServers());
    config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, keys);
    config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, values);
    return config;
  }

  /** A share container factory whose consumers have this configuration. */
  public static ShareKafkaListenerContainerFactory<String, String> shareFactory(
      Map<String, Object> consumerConfig) {
    return new ShareKafkaListenerContainerFactory<>(
        new DefaultShareConsumerFactory<>(consumerConfig));
  }

  /** A share container factory of String records over the in-JVM broker, 10 records a poll. */
  public static ShareKafkaListenerContainerFactory<String, String> stringShareFactory() {
    Map<String, Object> config = consumerConfig(StringDeserializer.class, StringDeserializer.class);
    config.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 10);
    return shareFactory(config);
  }

  /** A share container factory with {@link TestShareGroups#consumerConfig} of {@code group}. */
  public static ShareKafkaListenerContainerFactory<String, String> groupShareFactory(String group) {
    return shareFactory(TestShareGroups.consumerConfig(group));
  }

  /**
   * Creates a schema and the {@code topics} (one partition each) and points the application at
   * them, with a pool of {@code poolSize} connections and no clean-up; for applications that write
   * no {@code effects} (else {@link SpringTestEnvironment#prepare}).
   */
  public static String prepare(
      DynamicPropertyRegistry registry, String schemaPrefix, int poolSize, String... topics) {
    TestKafka.createTopics(1, topics);
    String schema = TestDatabase.newSchema(schemaPrefix);
    registry.add("spring.kafka.bootstrap-servers", TestKafka::bootstrapServers);
    registry.add("spring.datasource.url", () -> TestDatabase.url(schema));
    registry.add("spring.datasource.hikari.maximum-pool-size", () -> String.valueOf(poolSize));
    registry.add("consumer-dedup.cleanup.enabled", () -> "false");
    return schema;
  }
}
