package io.consumerdedup.docs.spring;

import io.consumerdedup.docs.DocsDatabase;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;

/**
 * The application of the README's Spring quick start: its {@link Payments} listener, on a schema of
 * its own. The {@code @SpringBootConfiguration} that {@code PaymentsRedeliveryTest} finds, as a
 * user's test finds the application's.
 */
@SpringBootConfiguration
@EnableAutoConfiguration
@Import(Payments.class)
class BillingApplication {
  @Bean
  DocsDatabase dataSource() {
    return DocsDatabase.create("docs_spring_billing");
  }
}
