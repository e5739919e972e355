package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.spring.Idempotent;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.FactoryBean;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.kafka.autoconfigure.KafkaAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.jdbc.datasource.DriverManagerDataSource;
import org.springframework.kafka.annotation.KafkaListener;

/**
 * An application whose {@code @Idempotent} listeners have no DataSource to keep the dedup table in
 * (spring-boot-starter-jdbc forgotten, so that Spring Boot configures none): consumer-dedup's
 * auto-configuration needs one. Without this check the application started as if protected, and its
 * listeners applied every redelivered record again, with no line in the log saying so.
 */
class IdempotentWithoutDataSourceTest {

  private final ApplicationContextRunner runner =
      new ApplicationContextRunner()
          .withConfiguration(
              // No DataSourceAutoConfiguration: spring-boot-starter-jdbc is not on the class path.
              AutoConfigurations.of(
                  KafkaAutoConfiguration.class,
                  ConsumerDedupAutoConfiguration.class,
                  IdempotentListenersWithoutDataSourceAutoConfiguration.class))
          .withPropertyValues("spring.kafka.listener.auto-startup=false")
          .withUserConfiguration(PaymentsConfiguration.class);

  @Test
  void anIdempotentListenerWithoutADataSourceStopsTheApplicationSayingItWouldBeUnprotected() {
    runner.run(
        context ->
            assertThat(context)
                .getFailure()
                .rootCause()
                .hasMessageContaining(
                    "@Idempotent listener "
                        + Payments.class.getName()
                        + "#charge would run without dedup: the application has no DataSource")
                .hasMessageContaining("spring-boot-starter-jdbc")
                .hasMessageContaining("consumer-dedup.enabled=false"));
  }

  @Test
  void consumerDedupTurnedOffLetsTheListenerRunWithoutADataSource() {
    runner
        .withPropertyValues("consumer-dedup.enabled=false")
        .run(context -> assertThat(context).hasNotFailed());
  }

  /**
   * A DataSource made by a FactoryBean whose object type shows only once it is created (as
   * JndiObjectFactoryBean's): the auto-configuration's conditions did not see it, and the refusal
   * said the application had no DataSource bean, pointing at a starter it had.
   */
  @Test
  void aDataSourceWhoseTypeShowsOnlyAtRunTimeIsNamedNotDenied() {
    runner
        .withUserConfiguration(LateTypedDataSourceConfiguration.class)
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining(
                        "@Idempotent listener " + Payments.class.getName() + "#charge would run")
                    .hasMessageContaining(
                        "DataSource bean 'lateDataSource' was not known to be one when the"
                            + " auto-configurations' conditions were evaluated")
                    .hasMessageNotContaining("has no DataSource")
                    .hasMessageContaining("consumer-dedup.enabled=false"));
  }

  @Configuration(proxyBeanMethods = false)
  static class LateTypedDataSourceConfiguration {
    @Bean
    FactoryBean<Object> lateDataSource() {
      return new FactoryBean<>() {
        @Override
        public Object getObject() {
          return new DriverManagerDataSource("jdbc:postgresql://127.0.0.1:1/never");
        }

        @Override
        public Class<?> getObjectType() {
          return DataSource.class;
        }
      };
    }
  }

  @Configuration(proxyBeanMethods = false)
  static class PaymentsConfiguration {
    @Bean
    Payments payments() {
      return new Payments();
    }
  }

  static class Payments {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(id = "payments-without-datasource", topics = "payments")
    void charge(String amount) {}
  }
}
