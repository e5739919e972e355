package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.testing.TestDatabase;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.KafkaAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.DefaultShareConsumerFactory;
import org.springframework.kafka.support.ShareAcknowledgment;
import org.springframework.util.ClassUtils;

/**
 * A share-group container (KIP-932) at start-up: an {@code @Idempotent} listener in one stops the
 * application, naming the listener, its factory and what to do; on spring-kafka 4.0 (Spring Boot
 * 4.0), which cannot renew a record's acquisition lock, the reason names that version and what
 * share groups need, and every share container is named in a warning. Runs on both Boot lines the
 * build tests (profile boot40 for 4.0).
 */
@ExtendWith(OutputCaptureExtension.class)
class ShareContainerStartupTest {
  /** What the application has: spring-kafka 4.1 and later can renew a share record's lock. */
  private static final boolean SPRING_KAFKA_41 =
      ClassUtils.hasMethod(ShareAcknowledgment.class, "renew");

  private static String schema;

  @BeforeAll
  static void createSchema() {
    schema = TestDatabase.newSchema("spring_share_container");
  }

  @AfterAll
  static void dropSchema() {
    TestDatabase.dropSchema(schema);
  }

  private final ApplicationContextRunner runner =
      new ApplicationContextRunner()
          .withConfiguration(
              AutoConfigurations.of(
                  DataSourceAutoConfiguration.class,
                  KafkaAutoConfiguration.class,
                  ConsumerDedupAutoConfiguration.class))
          .withUserConfiguration(ShareFactory.class)
          .withPropertyValues(
              "spring.datasource.url=" + TestDatabase.url(schema),
              "spring.datasource.hikari.maximum-pool-size=2",
              "spring.kafka.listener.auto-startup=false");

  @Test
  void anIdempotentListenerInAShareContainerStopsTheApplicationSayingWhyAndWhatToDo() {
    runner
        .withBean(Jobs.class)
        .run(
            context -> {
              assertThat(context)
                  .getFailure()
                  .rootCause()
                  .isInstanceOf(UnsupportedShareListenerException.class)
                  .hasMessageContaining(
                      "@Idempotent listener "
                          + Jobs.class.getName()
                          + "#run runs in a share-group container (factory 'shareFactory'")
                  .hasMessageContaining("Give the listener a consumer-group container factory");
              if (SPRING_KAFKA_41) {
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining("does not protect share-group listeners yet");
              } else {
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining("cannot renew its record's acquisition lock")
                    .hasMessageContaining("need spring-kafka 4.1 (Spring Boot 4.1)");
              }
            });
  }

  @Test
  void aShareContainerWithoutIdempotentIsNamedInAWarningOnSpringKafka40Only(CapturedOutput output) {
    runner
        .withBean(PlainJobs.class)
        .run(
            context -> {
              assertThat(context).hasNotFailed();
              String warning = "Share-group container plain-jobs (group jobs): consumer-dedup does";
              if (SPRING_KAFKA_41) {
                assertThat(output).doesNotContain(warning);
              } else {
                assertThat(output)
                    .contains(warning)
                    .contains("share groups need spring-kafka 4.1 (Spring Boot 4.1)");
              }
            });
  }

  @Configuration(proxyBeanMethods = false)
  static class ShareFactory {
    @Bean
    ShareKafkaListenerContainerFactory<String, String> shareFactory() {
      ShareKafkaListenerContainerFactory<String, String> factory =
          new ShareKafkaListenerContainerFactory<>(
              new DefaultShareConsumerFactory<>(
                  Map.of(
                      ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, "127.0.0.1:9",
                      ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class,
                      ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class)));
      factory.setAutoStartup(false);
      return factory;
    }
  }

  static class Jobs {
    @Idempotent(bizType = "job", header = "job-id")
    @KafkaListener(topics = "jobs", groupId = "jobs", containerFactory = "shareFactory")
    public void run(ConsumerRecord<String, String> record) {}
  }

  static class PlainJobs {
    @KafkaListener(
        id = "plain-jobs",
        topics = "jobs",
        groupId = "jobs",
        containerFactory = "shareFactory")
    public void run(ConsumerRecord<String, String> record) {}
  }
}
