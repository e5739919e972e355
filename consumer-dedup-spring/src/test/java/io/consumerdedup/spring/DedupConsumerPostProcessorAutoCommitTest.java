package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.junit.jupiter.api.Test;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.listener.ConcurrentMessageListenerContainer;
import org.springframework.kafka.listener.ContainerProperties;

/**
 * Whether a container's consumers commit by themselves, read as spring-kafka reads it when the
 * container starts: Boot's {@code spring.kafka.consumer.enable-auto-commit} reaches the consumer
 * factory as a {@code Boolean}, {@code @KafkaListener(properties)} the container as a string, and
 * the container's setting wins.
 */
class DedupConsumerPostProcessorAutoCommitTest {

  @Test
  void theContainersSettingWinsOverTheFactorysAndNeitherMeansNo() {
    assertThat(autoCommits(null, null)).isFalse();
    assertThat(autoCommits(Boolean.TRUE, null)).isTrue();
    assertThat(autoCommits("true", null)).isTrue();
    assertThat(autoCommits(Boolean.FALSE, null)).isFalse();
    assertThat(autoCommits(null, "true")).isTrue();
    assertThat(autoCommits(Boolean.TRUE, "false")).isFalse();
    assertThat(autoCommits(Boolean.FALSE, "true")).isTrue();
  }

  private static boolean autoCommits(Object factorySetting, String containerSetting) {
    Map<String, Object> config = new HashMap<>();
    config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, "localhost:9");
    if (factorySetting != null) {
      config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, factorySetting);
    }
    ContainerProperties properties = new ContainerProperties("topic");
    if (containerSetting != null) {
      Properties overrides = new Properties();
      overrides.setProperty(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, containerSetting);
      properties.setKafkaConsumerProperties(overrides);
    }
    return DedupConsumerPostProcessor.autoCommits(
        new ConcurrentMessageListenerContainer<>(
            new DefaultKafkaConsumerFactory<Object, Object>(config), properties));
  }
}
