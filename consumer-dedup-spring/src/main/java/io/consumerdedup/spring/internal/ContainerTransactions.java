package io.consumerdedup.spring.internal;

import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.transaction.KafkaAwareTransactionManager;

/**
 * Whether a container runs its records in transactions, decided as spring-kafka's listener consumer
 * decides it: Spring Boot puts the {@code KafkaTransactionManager} of {@code
 * spring.kafka.producer.transaction-id-prefix} in {@code setKafkaAwareTransactionManager}, which
 * {@code getTransactionManager()} does not return; an application may still set a Kafka one through
 * the deprecated {@code setTransactionManager}.
 */
public final class ContainerTransactions {
  private ContainerTransactions() {}

  /** Whether the container opens a transaction per record or batch, Kafka's or a database's. */
  @SuppressWarnings("removal")
  public static boolean any(ContainerProperties properties) {
    return properties.getKafkaAwareTransactionManager() != null
        || properties.getTransactionManager() != null;
  }

  /** Whether that transaction is Kafka's, whose commit carries the offsets. */
  @SuppressWarnings("removal")
  public static boolean kafka(ContainerProperties properties) {
    return properties.getKafkaAwareTransactionManager() != null
        || properties.getTransactionManager() instanceof KafkaAwareTransactionManager<?, ?>;
  }
}
