package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.kafka.DeadLetterHandler;
import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.testing.TestDatabase;
import java.time.Duration;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
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
import org.springframework.kafka.annotation.KafkaHandler;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.config.ShareKafkaListenerContainerFactory;
import org.springframework.kafka.core.DefaultShareConsumerFactory;
import org.springframework.kafka.core.ProducerFactory;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.ShareAcknowledgment;
import org.springframework.util.ClassUtils;

/**
 * A share-group container (KIP-932) at start-up. On spring-kafka 4.1 (Spring Boot 4.1) an {@code
 * Idempotent} listener in one starts, its container put in {@code ShareAckMode.MANUAL} and its
 * listener acknowledged by consumer-dedup, and the shapes that cannot be protected stop the
 * application saying why and what to do. On spring-kafka 4.0 (Spring Boot 4.0), which cannot renew
 * a record's acquisition lock, every {@code @Idempotent} share listener stops the application with
 * the reason and the fix (Boot 4.1), and every share container is named in a warning. Runs on both
 * Boot lines the build tests (module consumer-dedup-spring-boot40 for 4.0).
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
  void anIdempotentListenerInAShareContainerIsProtectedOn41AndStopsTheApplicationOn40(
      CapturedOutput output) {
    runner
        .withBean(Jobs.class)
        .run(
            context -> {
              if (SPRING_KAFKA_41) {
                assertThat(context).hasNotFailed();
                MessageListenerContainer container =
                    context
                        .getBean(KafkaListenerEndpointRegistry.class)
                        .getListenerContainer("jobs");
                assertThat(container.getContainerProperties().getMessageListener())
                    .as("the listener consumer-dedup acknowledges for")
                    .isInstanceOf(DedupShareListener.class);
                assertThat(output)
                    .contains(
                        "Share-group listener "
                            + Jobs.class.getName()
                            + "#run (group jobs): acknowledged by consumer-dedup");
              } else {
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .isInstanceOf(UnsupportedShareListenerException.class)
                    .hasMessageContaining(
                        "@Idempotent listener "
                            + Jobs.class.getName()
                            + "#run runs in a share-group container (factory 'shareFactory'")
                    .hasMessageContaining("cannot renew its record's acquisition lock")
                    .hasMessageContaining("Upgrade to Spring Boot 4.1");
              }
            });
  }

  /**
   * A transactional ProducerFactory that makes no non-transactional producer: the share listener's
   * dead letters, written outside any transaction, could never be sent, so the application stops
   * saying what to do instead of starting with a listener whose failed records are never
   * dead-lettered.
   */
  @Test
  void aTransactionalProducerFactoryWithoutPlainProducersStopsTheApplicationSayingWhatToDo() {
    runner
        .withBean(Jobs.class)
        .withUserConfiguration(TransactionalOnly.Config.class)
        .run(
            context -> {
              assertThat(context)
                  .getFailure()
                  .rootCause()
                  .isInstanceOf(UnsupportedShareListenerException.class)
                  .hasMessageContaining("@Idempotent listener " + Jobs.class.getName() + "#run");
              if (SPRING_KAFKA_41) {
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining("makes no non-transactional producer")
                    .hasMessageContaining("Define a DeadLetterHandler bean");
              }
            });
  }

  /** A ProducerFactory whose every producer is transactional (spring-kafka's default answer). */
  static final class TransactionalOnly implements ProducerFactory<Object, Object> {
    @Override
    public Producer<Object, Object> createProducer() {
      throw new IllegalStateException("a transactional producer cannot send a dead letter");
    }

    @Override
    public boolean transactionCapable() {
      return true;
    }

    @Configuration(proxyBeanMethods = false)
    static class Config {
      @Bean
      ProducerFactory<Object, Object> kafkaProducerFactory() {
        return new TransactionalOnly();
      }
    }
  }

  @Test
  void aShareListenerTakingItsAcknowledgmentStopsTheApplicationSayingWhatToDo() {
    runner
        .withBean(AcknowledgingJobs.class)
        .run(
            context -> {
              assertThat(context)
                  .getFailure()
                  .rootCause()
                  .isInstanceOf(UnsupportedShareListenerException.class)
                  .hasMessageContaining(
                      "@Idempotent listener " + AcknowledgingJobs.class.getName() + "#run");
              if (SPRING_KAFKA_41) {
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining("takes a ShareAcknowledgment or ShareConsumer argument")
                    .hasMessageContaining("Remove the argument");
              } else {
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining("Upgrade to Spring Boot 4.1");
              }
            });
  }

  @Test
  void anIdempotentKafkaHandlerInAShareContainerStopsTheApplicationSayingWhatToDo() {
    runner
        .withBean(ClassLevelJobs.class)
        .run(
            context -> {
              assertThat(context)
                  .getFailure()
                  .rootCause()
                  .isInstanceOf(UnsupportedShareListenerException.class)
                  .hasMessageContaining(
                      "@Idempotent listener " + ClassLevelJobs.class.getName() + "#run")
                  .hasMessageContaining(
                      SPRING_KAFKA_41
                          ? "Put @KafkaListener on the @Idempotent method itself"
                          : "Upgrade to Spring Boot 4.1");
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

  @Test
  void aDeadLetterHandlerBeanThatCannotWriteUndeserializableRecordsIsNamedAtStartUp(
      CapturedOutput output) {
    Assumptions.assumeTrue(SPRING_KAFKA_41, "a share listener starts on spring-kafka 4.1 only");
    DeadLetterHandler<Object, Object> onlyTyped = (record, reason) -> {};
    runner
        .withBean(Jobs.class)
        .withBean(DeadLetterHandler.class, () -> onlyTyped)
        .run(
            context -> {
              assertThat(context).hasNotFailed();
              assertThat(output)
                  .contains("does not implement deadLetterUndeserializable")
                  .contains("a record of share listener")
                  .contains("never dead-lettered");
            });
  }

  /**
   * A start-up refused by a second share listener (taking its acknowledgment) after the first was
   * wrapped: the dead-letter producers made for the first are closed, as nobody stops a listener
   * whose start failed.
   */
  @Test
  void aShareListenerRefusedAfterAnotherLeavesNoDeadLetterProducerRunning() {
    Assumptions.assumeTrue(SPRING_KAFKA_41, "a share listener starts on spring-kafka 4.1 only");
    long before = producerThreads();
    runner
        .withBean(Jobs.class)
        .withBean(AcknowledgingJobs.class)
        .run(context -> assertThat(context).hasFailed());
    assertNoProducerThreadsBeyond(before);
  }

  /**
   * A start-up refused after every share listener was wrapped (two listeners of different groups
   * sharing a biz type): their dead-letter producers are closed.
   */
  @Test
  void aStartUpRefusedAfterTheShareListenersWereWrappedLeavesNoDeadLetterProducerRunning() {
    Assumptions.assumeTrue(SPRING_KAFKA_41, "a share listener starts on spring-kafka 4.1 only");
    long before = producerThreads();
    runner
        .withBean(Jobs.class)
        .withBean(OtherGroupJobs.class)
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .isInstanceOf(SharedBizTypeException.class));
    assertNoProducerThreadsBeyond(before);
  }

  private static void assertNoProducerThreadsBeyond(long before) {
    await()
        .atMost(Duration.ofSeconds(5))
        .untilAsserted(
            () ->
                assertThat(producerThreads())
                    .as("dead-letter producer threads left running by the failed start-up")
                    .isEqualTo(before));
  }

  private static long producerThreads() {
    return Thread.getAllStackTraces().keySet().stream()
        .filter(t -> t.isAlive() && t.getName().startsWith("kafka-producer-network-thread"))
        .count();
  }

  static class OtherGroupJobs {
    @Idempotent(bizType = "job", header = "job-id")
    @KafkaListener(
        id = "other-jobs",
        topics = "jobs",
        groupId = "other-jobs",
        containerFactory = "shareFactory")
    public void run(ConsumerRecord<String, String> record) {}
  }

  static class Jobs {
    @Idempotent(bizType = "job", header = "job-id")
    @KafkaListener(
        id = "jobs",
        topics = "jobs",
        groupId = "jobs",
        containerFactory = "shareFactory")
    public void run(ConsumerRecord<String, String> record) {}
  }

  static class AcknowledgingJobs {
    @Idempotent(bizType = "job", header = "job-id")
    @KafkaListener(
        id = "acknowledging-jobs",
        topics = "jobs",
        groupId = "jobs",
        containerFactory = "shareFactory")
    public void run(ConsumerRecord<String, String> record, ShareAcknowledgment acknowledgment) {}
  }

  @KafkaListener(topics = "jobs", groupId = "jobs", containerFactory = "shareFactory")
  static class ClassLevelJobs {
    @Idempotent(bizType = "job", header = "job-id")
    @KafkaHandler
    public void run(String job) {}
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
