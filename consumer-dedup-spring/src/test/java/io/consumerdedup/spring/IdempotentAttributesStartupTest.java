package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.spring.autoconfigure.ConsumerDedupAutoConfiguration;
import io.consumerdedup.testing.TestDatabase;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.kafka.annotation.KafkaListener;

/**
 * What start-up makes of {@code @Idempotent}'s attributes and of where it is put: placeholders are
 * resolved as {@code @KafkaListener}'s are (taken literally, a header named "${app.key-header}" was
 * absent from every record, and every service shared the biz type "${spring.application.name}"),
 * and one resolving to blank is refused; an {@code @Idempotent} method beside its own class's
 * listener is warned of (called on {@code this} the call passes by the proxy, and every redelivery
 * was applied again).
 */
@ExtendWith(OutputCaptureExtension.class)
class IdempotentAttributesStartupTest {
  private static String schema;

  @BeforeAll
  static void setUp() {
    schema = TestDatabase.newSchema("spring_attributes");
  }

  @AfterAll
  static void tearDown() {
    TestDatabase.dropSchema(schema);
  }

  private static ApplicationContextRunner runner() {
    return new ApplicationContextRunner()
        .withConfiguration(
            AutoConfigurations.of(
                DataSourceAutoConfiguration.class, ConsumerDedupAutoConfiguration.class))
        .withPropertyValues("spring.datasource.url=" + TestDatabase.url(schema));
  }

  @Test
  void placeholdersInBizTypeHeaderAndKeyAreResolvedFromTheEnvironment() {
    runner()
        .withPropertyValues(
            "spring.application.name=billing", "app.key-header=order-no", "app.tenant=tenant")
        .withBean("payments", Placeholders.class)
        .run(
            context -> {
              assertThat(context).hasNotFailed();
              IdempotentListenerMethod byHeader =
                  IdempotentListenerMethod.of(
                      Placeholders.class.getMethod("charge", String.class),
                      "payments",
                      context.getBeanFactory());
              assertThat(byHeader.bizType).isEqualTo("billing-payment");
              assertThat(byHeader.keySource()).isEqualTo("header 'order-no'");
              IdempotentListenerMethod byKey =
                  IdempotentListenerMethod.of(
                      Placeholders.class.getMethod("refund", String.class),
                      "payments",
                      context.getBeanFactory());
              assertThat(byKey.keySource()).isEqualTo("key expression '#headers['tenant']'");
            });
  }

  @Test
  void aPlaceholderWithoutAPropertyStopsTheApplicationNamingIt() {
    runner()
        .withBean("payments", Placeholders.class)
        .run(
            context -> {
              assertThat(context).hasFailed();
              assertThat(refusal(context.getStartupFailure()))
                  .contains("Placeholders#charge (bean 'payments'): bizType")
                  .contains("'${spring.application.name}-payment' does not resolve");
            });
  }

  /**
   * Warned, not refused: called through the proxy (the bean injected into itself, another bean's
   * listener, a {@code @DltHandler}) it is deduplicated; called on {@code this} it is not.
   */
  @Test
  void anIdempotentMethodBesideItsClasssListenerIsWarnedOf(CapturedOutput output) {
    runner()
        .withBean("orders", SelfInvoked.class)
        .run(
            context -> {
              assertThat(context).hasNotFailed();
              assertThat(output)
                  .contains("WARN")
                  .contains("@Idempotent " + SelfInvoked.class.getName() + "#apply (bean 'orders')")
                  .contains("bypasses the proxy and gets no dedup")
                  .contains("Put @Idempotent on the @KafkaListener method");
              assertThat(context.getBean(IdempotentListenerPostProcessor.class).listeners())
                  .singleElement()
                  .extracting(IdempotentListenerPostProcessor.Listener::caveat)
                  .asString()
                  .contains("only when called through its proxy");
            });
  }

  @Test
  void aHeaderPlaceholderResolvingToBlankStopsTheApplicationNamingIt() {
    runner()
        .withBean("payments", BlankHeader.class)
        .run(
            context -> {
              assertThat(context).hasFailed();
              assertThat(refusal(context.getStartupFailure()))
                  .contains("BlankHeader#charge (bean 'payments'): header")
                  .contains("'${app.key-header:}' resolves to a blank value");
            });
  }

  @Test
  void anIdempotentMethodOfAnotherBeanStillStarts() {
    runner()
        .withBean("effects", CalledBean.class)
        .run(context -> assertThat(context).hasNotFailed());
  }

  private static String refusal(Throwable failure) {
    Throwable cause = failure;
    while (cause != null && !(cause instanceof InvalidIdempotentListenerException)) {
      cause = cause.getCause();
    }
    assertThat(cause).as("the refusal").isNotNull();
    return cause.getMessage();
  }

  static class Placeholders {
    @Idempotent(bizType = "${spring.application.name}-payment", header = "${app.key-header}")
    @KafkaListener(id = "charge", topics = "charge", autoStartup = "false")
    public void charge(String payload) {}

    @Idempotent(bizType = "refund", key = "#headers['${app.tenant}']")
    @KafkaListener(id = "refund", topics = "refund", autoStartup = "false")
    public void refund(String payload) {}
  }

  static class SelfInvoked {
    @KafkaListener(id = "orders", topics = "orders", autoStartup = "false")
    public void onRecord(ConsumerRecord<String, String> record) {
      apply(record.value());
    }

    @Idempotent(bizType = "order", key = "#payload")
    public void apply(String payload) {}
  }

  static class BlankHeader {
    @Idempotent(bizType = "payment", header = "${app.key-header:}")
    @KafkaListener(id = "charge", topics = "charge", autoStartup = "false")
    public void charge(String payload) {}
  }

  /** Called through its proxy by a listener of another bean. */
  static class CalledBean {
    @Idempotent(bizType = "effect", key = "#payload")
    public void apply(String payload) {}
  }
}
