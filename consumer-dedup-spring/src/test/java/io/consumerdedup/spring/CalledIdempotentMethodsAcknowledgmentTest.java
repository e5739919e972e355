package io.consumerdedup.spring;

import static io.consumerdedup.spring.SpringTestEnvironment.committed;
import static io.consumerdedup.spring.SpringTestEnvironment.effect;
import static io.consumerdedup.spring.SpringTestEnvironment.effects;
import static io.consumerdedup.spring.SpringTestEnvironment.send;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStore;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.kafka.autoconfigure.ConcurrentKafkaListenerContainerFactoryConfigurer;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.config.KafkaListenerEndpointRegistry;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.CommonContainerStoppingErrorHandler;
import org.springframework.kafka.listener.ContainerProperties.AckMode;
import org.springframework.kafka.listener.MessageListenerContainer;
import org.springframework.kafka.support.Acknowledgment;
import org.springframework.messaging.Message;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A {@code @KafkaListener} that is not {@code @Idempotent} itself calls two {@code @Idempotent}
 * methods of other beans per record, one per biz type, and acknowledges the record once both are
 * done, in a manual ack mode. The second method fails on its first two runs, and each failure stops
 * the container, as a process dying before the retry would. On the first redelivery the first
 * method is a duplicate: the record is the calling listener's to acknowledge, not the duplicate's,
 * so no offset may pass it before the second method has applied it. A real PostgreSQL and the
 * in-JVM broker.
 */
@SpringBootTest(classes = CalledIdempotentMethodsAcknowledgmentTest.App.class)
@DirtiesContext
@ExtendWith(OutputCaptureExtension.class)
class CalledIdempotentMethodsAcknowledgmentTest {
  static final Duration WAIT = Duration.ofSeconds(30);
  static final String IMMEDIATE = "siback-immediate";
  static final String MANUAL = "siback-manual";
  static final String BILL = "siback-bill";
  static final String SHIP = "siback-ship";
  static final String INVOICES = "siback-invoices";
  static final String INVOICE = "siback-invoice";
  static final String HANDED = "siback-handed";
  static final String CHARGE = "siback-charge";
  static final int SHIPPING_FAILURES = 2;
  static final Map<String, AtomicInteger> shipCalls = new ConcurrentHashMap<>();

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    SpringTestEnvironment.prepare(registry, "siback", IMMEDIATE, MANUAL, INVOICES, HANDED);
  }

  @Autowired KafkaTemplate<String, String> template;
  @Autowired JdbcTemplate jdbc;
  @Autowired DedupStore store;
  @Autowired KafkaListenerEndpointRegistry containers;

  @Test
  void underManualImmediateADuplicateOfACalledMethodDoesNotCommitPastTheRecord() throws Exception {
    secondMethodFailingTwiceIsAppliedOnceAfterRestarts(IMMEDIATE, "I-1");
  }

  /**
   * Ack mode {@code MANUAL}: spring-kafka commits the acknowledgments it queued before an error
   * handler that seeks runs, and as the container stops.
   */
  @Test
  void underManualADuplicateOfACalledMethodDoesNotCommitPastTheRecord() throws Exception {
    secondMethodFailingTwiceIsAppliedOnceAfterRestarts(MANUAL, "M-1");
  }

  private void secondMethodFailingTwiceIsAppliedOnceAfterRestarts(String topic, String orderNo)
      throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(topic);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    long offset = send(template, topic, "credit 5", "order-no", orderNo);

    for (int failure = 1; failure <= SHIPPING_FAILURES; failure++) {
      int failed = failure;
      await()
          .atMost(WAIT)
          .alias("the container stopped by shipping's failure " + failed)
          .until(() -> !container.isRunning() && shipCalls(orderNo) == failed);
      assertThat(committed(topic, topic, 0))
          .as(
              "the group's committed offset after shipping's failure %d, its record at offset %d"
                  + " (billing's key %s, shipping's %s)",
              failure, offset, status(BILL, orderNo), status(SHIP, orderNo))
          .isLessThanOrEqualTo(offset);
      container.start();
    }

    await()
        .atMost(WAIT)
        .alias("shipping's effect of " + orderNo + " after the restarts")
        .until(() -> effects(jdbc, SHIP, orderNo) == 1);
    await().atMost(WAIT).until(() -> committed(topic, topic, 0) > offset);
    assertThat(effects(jdbc, BILL, orderNo)).as("%s billed", orderNo).isEqualTo(1);
    assertThat(effects(jdbc, SHIP, orderNo)).as("%s shipped", orderNo).isEqualTo(1);
  }

  /**
   * A method that takes no {@code Acknowledgment}, called by a listener that acknowledges, in ack
   * mode {@code MANUAL}: the records are committed, so a WARN saying none is would be false.
   */
  @Test
  void aMethodThatAListenerAcknowledgingCallsIsNotWarnedOf(CapturedOutput output) throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(INVOICES);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    long offset = send(template, INVOICES, "credit 5", "order-no", "N-1");

    await().atMost(WAIT).until(() -> committed(INVOICES, INVOICES, 0) > offset);
    assertThat(effects(jdbc, INVOICE, "N-1")).as("N-1 invoiced").isEqualTo(1);
    assertThat(output.getAll().lines().filter(line -> line.contains("Billing#invoice")))
        .as("lines naming the method, whose calling listener acknowledges")
        .noneMatch(line -> line.contains("takes no Acknowledgment"));
  }

  /**
   * A listener hands its {@code Acknowledgment} to the method it calls, which acknowledges: the
   * record is the method's to acknowledge, a duplicate's too, or its offset is never committed and
   * the lag never reaches zero.
   */
  @Test
  void aMethodHandedTheAcknowledgmentAcknowledgesItsDuplicate() throws Exception {
    MessageListenerContainer container = containers.getListenerContainer(HANDED);
    await().atMost(WAIT).until(() -> !container.getAssignedPartitions().isEmpty());
    send(template, HANDED, "charge 5", "order-no", "H-1");
    long copy = send(template, HANDED, "charge 5", "order-no", "H-1");

    await()
        .atMost(WAIT)
        .alias("the group's committed offset past the copy of H-1 at offset " + copy)
        .until(() -> committed(HANDED, HANDED, 0) > copy);
    assertThat(effects(jdbc, CHARGE, "H-1")).as("H-1 charged").isEqualTo(1);
  }

  /**
   * Two {@code @KafkaListener} annotations on one method (held in {@code @KafkaListeners}): the
   * containers call it, so its duplicates are its to acknowledge.
   */
  @Test
  void aMethodWithTwoKafkaListenersAcknowledgesItsRecord() throws Exception {
    IdempotentListenerMethod method =
        IdempotentListenerMethod.of(
            TwoTopics.class.getMethod("on", Message.class), "twoTopics", null);
    assertThat(method).isNotNull();
    assertThat(method.acknowledgesItsRecord).isTrue();
  }

  private Object status(String bizType, String orderNo) {
    return store.find(DedupKey.of(bizType, orderNo)).map(DedupRecord::status).orElse(null);
  }

  private static int shipCalls(String orderNo) {
    AtomicInteger calls = shipCalls.get(orderNo);
    return calls == null ? 0 : calls.get();
  }

  static class Billing {
    final JdbcTemplate jdbc;

    Billing(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    /** Takes the message, which carries the container's acknowledgment in a header. */
    @Idempotent(bizType = BILL, header = "order-no")
    public void bill(Message<String> message) {
      Object header = message.getHeaders().get("order-no");
      String orderNo =
          header instanceof byte[] bytes
              ? new String(bytes, StandardCharsets.UTF_8)
              : String.valueOf(header);
      effect(jdbc, BILL, orderNo, message.getPayload());
    }

    /** Takes the acknowledgment its listener hands over, and acknowledges once applied. */
    @Idempotent(bizType = CHARGE, header = "order-no")
    public void charge(String orderNo, String payload, Acknowledgment ack) {
      effect(jdbc, CHARGE, orderNo, payload);
      ack.acknowledge();
    }

    /** Takes no way to acknowledge: the calling listener does. */
    @Idempotent(bizType = INVOICE, header = "order-no")
    public void invoice(String orderNo, String payload) {
      effect(jdbc, INVOICE, orderNo, payload);
    }
  }

  /** Not a bean: only read. */
  static class TwoTopics {
    @Idempotent(bizType = "siback-two", header = "order-no")
    @KafkaListener(id = "siback-two-a", topics = "siback-two-a")
    @KafkaListener(id = "siback-two-b", topics = "siback-two-b")
    public void on(Message<String> message) {}
  }

  static class Shipping {
    final JdbcTemplate jdbc;

    Shipping(JdbcTemplate jdbc) {
      this.jdbc = jdbc;
    }

    /** Takes no way to acknowledge: the calling listener does. */
    @Idempotent(bizType = SHIP, header = "order-no")
    public void ship(String orderNo, String payload) {
      if (shipCalls.computeIfAbsent(orderNo, k -> new AtomicInteger()).incrementAndGet()
          <= SHIPPING_FAILURES) {
        throw new IllegalStateException("the carrier refused the shipment");
      }
      effect(jdbc, SHIP, orderNo, payload);
    }
  }

  static class Orders {
    final Billing billing;
    final Shipping shipping;

    Orders(Billing billing, Shipping shipping) {
      this.billing = billing;
      this.shipping = shipping;
    }

    @KafkaListener(id = IMMEDIATE, topics = IMMEDIATE, containerFactory = "immediateStopping")
    public void onImmediate(Message<String> message, Acknowledgment ack) {
      billThenShip(message, ack);
    }

    @KafkaListener(id = MANUAL, topics = MANUAL, containerFactory = "manualStopping")
    public void onManual(Message<String> message, Acknowledgment ack) {
      billThenShip(message, ack);
    }

    @KafkaListener(id = INVOICES, topics = INVOICES, containerFactory = "manualStopping")
    public void onInvoice(String payload, @Header("order-no") String orderNo, Acknowledgment ack) {
      billing.invoice(orderNo, payload);
      ack.acknowledge();
    }

    @KafkaListener(id = HANDED, topics = HANDED, containerFactory = "manualStopping")
    public void onHanded(String payload, @Header("order-no") String orderNo, Acknowledgment ack) {
      billing.charge(orderNo, payload, ack);
    }

    private void billThenShip(Message<String> message, Acknowledgment ack) {
      billing.bill(message);
      byte[] orderNo = (byte[]) message.getHeaders().get("order-no");
      shipping.ship(new String(orderNo, StandardCharsets.UTF_8), message.getPayload());
      ack.acknowledge();
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    Billing billing(JdbcTemplate jdbc) {
      return new Billing(jdbc);
    }

    @Bean
    Shipping shipping(JdbcTemplate jdbc) {
      return new Shipping(jdbc);
    }

    @Bean
    Orders orders(Billing billing, Shipping shipping) {
      return new Orders(billing, shipping);
    }

    /** Acknowledged offsets committed after the listener returns; a failure stops it. */
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> manualStopping(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      return stopping(configurer, consumerFactory, AckMode.MANUAL);
    }

    /** Acknowledged offsets committed at once; a failure stops the container. */
    @Bean
    ConcurrentKafkaListenerContainerFactory<Object, Object> immediateStopping(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory) {
      return stopping(configurer, consumerFactory, AckMode.MANUAL_IMMEDIATE);
    }

    private static ConcurrentKafkaListenerContainerFactory<Object, Object> stopping(
        ConcurrentKafkaListenerContainerFactoryConfigurer configurer,
        ConsumerFactory<Object, Object> consumerFactory,
        AckMode ackMode) {
      ConcurrentKafkaListenerContainerFactory<Object, Object> factory =
          new ConcurrentKafkaListenerContainerFactory<>();
      configurer.configure(factory, consumerFactory);
      factory.getContainerProperties().setAckMode(ackMode);
      factory.setCommonErrorHandler(new CommonContainerStoppingErrorHandler());
      return factory;
    }
  }
}
