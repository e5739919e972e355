package io.consumerdedup.docs.spring;

import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.kafka.config.ContainerCustomizer;
import org.springframework.kafka.listener.ConcurrentMessageListenerContainer;

/** Mode TRANSACTIONAL with the container's transaction manager (docs/spring-boot.md). */
@Configuration(proxyBeanMethods = false)
class ContainerTransactions {
  // tag::transaction-manager[]
  @Bean
  ContainerCustomizer<Object, Object, ConcurrentMessageListenerContainer<Object, Object>>
      databaseTransactions(DataSourceTransactionManager transactionManager) {
    return container ->
        container.getContainerProperties().setTransactionManager(transactionManager);
  }
  // end::transaction-manager[]
}
