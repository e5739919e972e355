package io.consumerdedup.docs.spring;

import static io.consumerdedup.docs.DocsKafka.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.docs.DocsKafka;
import io.consumerdedup.testing.TestKafka;
import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * docs/spring-boot.md's container transaction manager: in mode TRANSACTIONAL the README's listener
 * claims its key in the container's database transaction. Without it the claim has no transaction,
 * and the record is held with an error instead of applied.
 */
@SpringBootTest(
    classes = {BillingApplication.class, ContainerTransactions.class},
    properties = "consumer-dedup.mode=transactional")
@DirtiesContext
class ContainerTransactionsTest {
  @DynamicPropertySource
  static void kafka(DynamicPropertyRegistry registry) throws Exception {
    DocsKafka.startGroupAtEnd("billing", "payments");
    registry.add("spring.kafka.bootstrap-servers", TestKafka::bootstrapServers);
  }

  @Autowired KafkaListenerEndpointRegistry containers;
  @Autowired DedupStore store;

  @Test
  void theListenerOfAContainerWithTheDatabaseTransactionManagerIsAppliedInModeTransactional()
      throws Exception {
    for (MessageListenerContainer container : containers.getListenerContainers()) {
      assertThat(container.getContainerProperties().getTransactionManager())
          .isInstanceOf(DataSourceTransactionManager.class);
    }

    send("payments", "25.00", "order-no", "TX-7001");

    DedupKey key = DedupKey.of("payment", "TX-7001");
    await()
        .atMost(Duration.ofSeconds(60))
        .until(() -> store.find(key).map(r -> r.status() == DedupStatus.SUCCESS).orElse(false));
  }
}
