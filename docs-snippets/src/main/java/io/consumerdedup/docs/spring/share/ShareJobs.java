package io.consumerdedup.docs.spring.share;

// tag::share-listener[]
import io.consumerdedup.spring.Idempotent;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.boot.kafka.autoconfigure.KafkaProperties;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.DefaultShareConsumerFactory;
import org.springframework.stereotype.Component;

@Configuration(proxyBeanMethods = false)
class ShareQueueConfiguration {
  /** Share-group containers: Spring Boot 4.1 makes no factory for them. */
  @Bean
  ShareKafkaListenerContainerFactory<String, String> shareFactory(KafkaProperties kafka) {
    Map<String, Object> config =
        Map.of(
            ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, kafka.getBootstrapServers(),
            ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class,
            ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    return new ShareKafkaListenerContainerFactory<>(new DefaultShareConsumerFactory<>(config));
  }
}

@Component
class ShareJobs {
  private static final Logger log = LoggerFactory.getLogger(ShareJobs.class);

  @Idempotent(bizType = "payment", header = "order-no")
  @KafkaListener(
      topics = "payments",
      groupId = "billing-queue", // the share group
      containerFactory = "shareFactory",
      concurrency = "3") // three consumers; run as many instances as you like
  void charge(String amount) {
    log.info("Charging {}", amount); // applied once per order-no
  }
}
// end::share-listener[]
