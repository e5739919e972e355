package io.consumerdedup.examples.spring;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupListener;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.examples.ledger.Bank;
import io.consumerdedup.examples.ledger.EffectHandler;
import io.consumerdedup.examples.ledger.EffectKind;
import io.consumerdedup.examples.ledger.Ledger;
import io.consumerdedup.examples.report.RunStats;
import io.consumerdedup.spring.Idempotent;
import javax.sql.DataSource;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.context.annotation.Bean;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.support.Acknowledgment;

/**
 * A payment service as Spring Boot users write it: one {@code @KafkaListener} that charges, made
 * idempotent by {@code @Idempotent} and the auto-configuration (which reads {@code
 * consumer-dedup.*}; {@code consumer-dedup.enabled=false} runs the very same listener unprotected).
 * The demo starts it with {@code SpringApplication}, on its own PostgreSQL schema and broker.
 *
 * <p>The run's counters are handed in as the bean {@code demoStats}; {@code demo.acknowledge=false}
 * makes the listener charge without acknowledging, so that closing the application loses the offset
 * commit.
 */
@SpringBootConfiguration
@EnableAutoConfiguration
public class SpringPaymentsApplication {

  @Bean
  PaymentListener paymentListener(
      DataSource dataSource,
      RunStats demoStats,
      @Value("${demo.acknowledge:true}") boolean acknowledge) {
    return new PaymentListener(
        new EffectHandler(
            new Ledger(dataSource),
            EffectKind.CHARGE,
            "order-no",
            Bank.healthy(),
            "spring billing",
            demoStats),
        acknowledge);
  }

  /** Counts the deliveries the library skipped, for the report. */
  @Bean
  DedupListener duplicateCounter(RunStats demoStats) {
    return new DedupListener() {
      @Override
      public void duplicate(DedupKey key, DedupRecord existing) {
        demoStats.duplicateSkipped();
      }
    };
  }

  /** The listener: charge the order in the record. */
  public static class PaymentListener {
    private final EffectHandler payments;
    private final boolean acknowledge;

    PaymentListener(EffectHandler payments, boolean acknowledge) {
      this.payments = payments;
      this.acknowledge = acknowledge;
    }

    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(id = "spring-billing", topics = "${demo.topic}", groupId = "${demo.group}")
    public void charge(ConsumerRecord<String, String> record, Acknowledgment ack) throws Exception {
      payments.handle(record);
      if (acknowledge) {
        ack.acknowledge();
      }
    }
  }
}
