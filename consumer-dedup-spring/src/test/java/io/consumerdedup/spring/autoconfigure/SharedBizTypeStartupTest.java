package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.spring.Idempotent;
import io.consumerdedup.testing.TestDatabase;
import org.apache.kafka.clients.consumer.ConsumerRecord;
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
import org.springframework.kafka.annotation.KafkaListener;

/**
 * Two {@code @Idempotent} listeners of different consumer groups with one biz type would skip each
 * other's keys as duplicates: the application does not start, and says which listeners, which
 * groups, and what to do. Listeners of one group may share a biz type, and so may groups of a biz
 * type listed in {@code consumer-dedup.shared-biz-types}; within one group, listeners of different
 * topics sharing one are named in a WARN, as a biz type copied with the listener would skip, say,
 * the refund of an order whose payment was applied.
 */
@ExtendWith(OutputCaptureExtension.class)
class SharedBizTypeStartupTest {
  private static String schema;

  @BeforeAll
  static void createSchema() {
    schema = TestDatabase.newSchema("spring_shared_biz_type");
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
          .withPropertyValues(
              "spring.datasource.url=" + TestDatabase.url(schema),
              "spring.datasource.hikari.maximum-pool-size=2",
              "spring.kafka.listener.auto-startup=false",
              "spring.kafka.consumer.group-id=ledger");

  @Test
  void listenersOfTwoGroupsSharingABizTypeStopTheApplicationNamingBothAndTheRemedy() {
    runner
        .withBean(Billing.class)
        .withBean(Ledger.class)
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .isInstanceOf(DedupConfigurationException.class)
                    .hasMessageContaining(Billing.class.getName() + "#charge (group billing)")
                    .hasMessageContaining(Ledger.class.getName() + "#record (group ledger)")
                    .hasMessageContaining("share biz type 'payment'")
                    .hasMessageContaining("Give each kind of action its own biz type")
                    .hasMessageContaining("consumer-dedup.shared-biz-types"));
  }

  @Test
  void theGroupIdAttributeAndAPlaceholderInItDecideTheGroup() {
    runner
        .withPropertyValues("audit.group=audit")
        .withBean(Billing.class)
        .withBean(Audit.class)
        .run(
            context ->
                assertThat(context)
                    .getFailure()
                    .rootCause()
                    .hasMessageContaining(Billing.class.getName() + "#charge (group billing)")
                    .hasMessageContaining(Audit.class.getName() + "#check (group audit)"));
  }

  @Test
  void aBizTypeListedAsSharedStarts() {
    runner
        .withPropertyValues("consumer-dedup.shared-biz-types=payment")
        .withBean(Billing.class)
        .withBean(Ledger.class)
        .run(context -> assertThat(context).hasNotFailed());
  }

  @Test
  void listenersOfOneGroupOnDifferentTopicsMayShareABizTypeNamedInAWarning(CapturedOutput output) {
    runner
        .withBean(Ledger.class)
        .withBean(LedgerToo.class)
        .run(context -> assertThat(context).hasNotFailed());
    assertThat(output)
        .contains(
            Ledger.class.getName()
                + "#record (topics [payments]) and "
                + LedgerToo.class.getName()
                + "#record (topics [refunds]) of group ledger share biz type 'payment'")
        .contains("consumer-dedup.shared-biz-types");
  }

  @Test
  void aBizTypeListedAsSharedIsNotWarnedAboutWithinAGroup(CapturedOutput output) {
    runner
        .withPropertyValues("consumer-dedup.shared-biz-types=payment")
        .withBean(Ledger.class)
        .withBean(LedgerToo.class)
        .run(context -> assertThat(context).hasNotFailed());
    assertThat(output).doesNotContain("share biz type");
  }

  /** Group billing: its id. */
  static class Billing {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(id = "billing", topics = "payments")
    public void charge(ConsumerRecord<String, String> record) {}
  }

  /** Group ledger: the consumer factory's, as its id is not its group. */
  static class Ledger {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(id = "ledger-payments", idIsGroup = false, topics = "payments")
    public void record(ConsumerRecord<String, String> record) {}
  }

  /** Group ledger too: the consumer factory's, as it has no id. */
  static class LedgerToo {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(topics = "refunds")
    public void record(ConsumerRecord<String, String> record) {}
  }

  /** Group audit: its groupId, from a property. */
  static class Audit {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(id = "audit-payments", groupId = "${audit.group}", topics = "payments")
    public void check(ConsumerRecord<String, String> record) {}
  }
}
