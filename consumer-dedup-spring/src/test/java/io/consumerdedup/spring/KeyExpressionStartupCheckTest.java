package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.annotation.JsonSubTypes;
import com.fasterxml.jackson.annotation.JsonTypeInfo;
import io.consumerdedup.spring.autoconfigure.ConsumerDedupAutoConfiguration;
import io.consumerdedup.testing.TestDatabase;
import java.math.BigDecimal;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.messaging.Message;
import tools.jackson.databind.JsonNode;

/**
 * A key or fingerprint expression that cannot give a key is refused at start-up, naming the method,
 * its bean and the expression and saying what to write instead, rather than failing (or
 * dead-lettering) every record. Expressions whose payload type is not known at start-up, and every
 * form the documentation shows, still start.
 */
class KeyExpressionStartupCheckTest {
  private static final String PREFIX = KeyExpressionStartupCheckTest.class.getName() + "$";
  private static final String VARIABLES =
      "the expression has no root object: it reads the record through #payload, #headers, #record"
          + " and #topic";
  private static String schema;

  @BeforeAll
  static void setUp() {
    schema = TestDatabase.newSchema("spring_key_check");
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

  /** The message of the refusal of {@code listener}, registered as bean {@code orders}. */
  private static <T> String refusal(Class<T> listener) {
    String[] message = new String[1];
    runner()
        .withBean("orders", listener)
        .run(
            context -> {
              assertThat(context).hasFailed();
              Throwable failure = context.getStartupFailure();
              while (failure != null && !(failure instanceof InvalidIdempotentListenerException)) {
                failure = failure.getCause();
              }
              assertThat(failure).as("the refusal").isNotNull();
              message[0] = failure.getMessage();
            });
    return message[0];
  }

  @Test
  void aHeaderNameInKeyIsRefusedSuggestingHeader() {
    assertThat(refusal(HeaderNameInKey.class))
        .isEqualTo(
            "@Idempotent on "
                + PREFIX
                + "HeaderNameInKey#charge (bean 'orders'): key expression 'order-no' reads order"
                + " as a property of the evaluation root, but "
                + VARIABLES
                + " ('order-no' is parsed as an expression, not as a name). To take the key from"
                + " the header 'order-no', write header = \"order-no\" instead (or key ="
                + " \"#headers['order-no']\")");
  }

  @Test
  void aBareNameThatThePayloadHasIsRefusedSuggestingThePayloadsProperty() {
    assertThat(refusal(BareProperty.class))
        .isEqualTo(
            "@Idempotent on "
                + PREFIX
                + "BareProperty#charge (bean 'orders'): key expression 'orderNo' reads orderNo as"
                + " a property of the evaluation root, but "
                + VARIABLES
                + ". To take the key from the payload's property, write key = \"#payload.orderNo\";"
                + " to take the key from the header 'orderNo', write header = \"orderNo\" instead"
                + " (or key = \"#headers['orderNo']\")");
  }

  @Test
  void aBareNameInsideALongerExpressionIsRefusedSuggestingAVariable() {
    assertThat(refusal(BareNameInConcatenation.class))
        .isEqualTo(
            "@Idempotent on "
                + PREFIX
                + "BareNameInConcatenation#charge (bean 'orders'): key expression"
                + " '#headers['tenant'] + ':' + eventId' reads eventId as a property of the"
                + " evaluation root, but "
                + VARIABLES
                + ". Read it through a variable: #headers['eventId'] for a header, #payload.eventId"
                + " for a property of the payload");
  }

  @Test
  void aVariableWrittenWithoutItsHashIsRefusedWithTheHash() {
    assertThat(refusal(VariableWithoutHash.class))
        .isEqualTo(
            "@Idempotent on "
                + PREFIX
                + "VariableWithoutHash#charge (bean 'orders'): key expression 'payload.orderNo'"
                + " reads payload as a property of the evaluation root, but "
                + VARIABLES
                + ". Write key = \"#payload.orderNo\" (variables start with #)");
  }

  @Test
  void aPropertyThePayloadTypeLacksIsRefusedListingTheOnesItHas() {
    assertThat(refusal(MissingPayloadProperty.class))
        .isEqualTo(
            "@Idempotent on "
                + PREFIX
                + "MissingPayloadProperty#charge (bean 'orders'): key expression"
                + " '#payload.orderNumber' reads the property orderNumber of #payload, the payload,"
                + " a "
                + PREFIX
                + "Order, which has no such property (no getter, record component or public"
                + " field); Order has: amount, customer, orderNo. Read one of its properties, or a"
                + " header with #headers['name']");
  }

  @Test
  void aPropertyChainIsFollowedThroughTheDeclaredTypes() {
    assertThat(refusal(MissingNestedProperty.class))
        .isEqualTo(
            "@Idempotent on "
                + PREFIX
                + "MissingNestedProperty#charge (bean 'orders'): key expression"
                + " '#payload.customer.idd' reads the property idd of #payload.customer, a "
                + PREFIX
                + "Customer, which has no such property (no getter, record component or public"
                + " field); Customer has: id, name. Write #payload.customer.id if that is the"
                + " property you mean");
  }

  @Test
  void aPropertyOfAStringPayloadIsRefusedSayingHowToGetAClass() {
    assertThat(refusal(PropertyOfStringPayload.class))
        .isEqualTo(
            "@Idempotent on "
                + PREFIX
                + "PropertyOfStringPayload#charge (bean 'orders'): key expression"
                + " '#payload.orderNo' reads the property orderNo of #payload, the payload, a"
                + " java.lang.String, which has no such property (no getter, record component or"
                + " public field). Take the payload as a class that has orderNo (a parameter of"
                + " that type, converted from JSON by the listener's message converter or"
                + " deserializer); to take the key from the header 'orderNo', write header ="
                + " \"orderNo\" instead (or key = \"#headers['orderNo']\")");
  }

  @Test
  void theRecordValueTypeOfABatchIsThePayloadType() {
    assertThat(refusal(BatchOfOrders.class))
        .startsWith(
            "@Idempotent on "
                + PREFIX
                + "BatchOfOrders#charge (bean 'orders'): key expression '#payload.orderNumber'"
                + " reads the property orderNumber of #payload, the payload, a "
                + PREFIX
                + "Order,");
  }

  @Test
  void anUnknownVariableIsRefusedWithTheKnownOnes() {
    assertThat(refusal(MisspelledPayload.class))
        .isEqualTo(
            "@Idempotent on "
                + PREFIX
                + "MisspelledPayload#charge (bean 'orders'): key expression '#paylod.orderNo'"
                + " reads the variable #paylod, which is not defined: the variables are #payload,"
                + " #headers, #record and #topic. Write key = \"#payload.orderNo\"");
    assertThat(refusal(SingularHeaders.class))
        .endsWith(
            "key expression '#header['order-no']' reads the variable #header, which is not"
                + " defined: the variables are #payload, #headers, #record and #topic. Write key ="
                + " \"#headers['order-no']\"");
  }

  @Test
  void aFingerprintExpressionIsCheckedLikeTheKey() {
    assertThat(refusal(BareFingerprint.class))
        .isEqualTo(
            "@Idempotent on "
                + PREFIX
                + "BareFingerprint#charge (bean 'orders'): fingerprint expression 'amount' reads"
                + " amount as a property of the evaluation root, but "
                + VARIABLES
                + ". To read the payload's property, write fingerprint = \"#payload.amount\"; to"
                + " read the header 'amount', write fingerprint = \"#headers['amount']\"");
  }

  @Test
  void anExpressionThatDoesNotParseIsRefused() {
    assertThat(refusal(Unparsable.class))
        .isEqualTo(
            "@Idempotent on "
                + PREFIX
                + "Unparsable#charge (bean 'orders'): key expression '#headers['order-no'' does"
                + " not parse (at character 19): EL1044E: Unexpectedly ran out of input. Write a"
                + " SpEL expression over"
                + " #payload, #headers, #record and #topic, or header = \"name\" to take the key"
                + " from a header");
  }

  @Test
  void aPropertyNeitherThePayloadTypeNorItsDeclaredSubtypesHaveIsStillRefused() {
    assertThat(refusal(PropertyNoSubtypeHas.class))
        .contains("reads the property ordrNo of #payload")
        .contains("Payment and its declared subtypes have: currency, orderNo")
        .contains("Write #payload.orderNo if that is the property you mean");
  }

  /**
   * SpEL reads a JsonNode's getters, not its fields: {@code #payload.orderNo} failed on every
   * record, each dead-lettered as a malformed key.
   */
  @Test
  void aFieldOfAJsonTreeReadAsAPropertyIsRefusedSuggestingGet() {
    assertThat(refusal(FieldOfJsonTree.class))
        .contains("key expression '#payload.orderNo' reads the field orderNo of #payload")
        .contains("SpEL reads a JSON tree's getters, not its fields")
        .contains("Write #payload.get('orderNo').asString()");
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(
      classes = {
        DocumentedForms.class,
        PayloadOfUnknownType.class,
        BatchOfMessages.class,
        GenericEnvelope.class,
        PropertyOfADeclaredSubtype.class
      })
  void expressionsThatCanGiveAKeyStillStart(Class<?> listener) {
    runner().withBean(listener).run(context -> assertThat(context).hasNotFailed());
  }

  public record Customer(String id, String name) {}

  public record Order(String orderNo, BigDecimal amount, Customer customer) {}

  public static class Envelope<T> {
    private T data;

    public T getData() {
      return data;
    }
  }

  public interface Event {}

  /**
   * A payload type of a polymorphic topic: Jackson turns each record into the subtype its type
   * property names, and SpEL reads the property of the object it is given, whatever the declared
   * type.
   */
  @JsonTypeInfo(use = JsonTypeInfo.Id.NAME, property = "type")
  @JsonSubTypes(@JsonSubTypes.Type(value = CardPayment.class, name = "card"))
  public static class Payment {
    public String getCurrency() {
      return "EUR";
    }
  }

  public static class CardPayment extends Payment {
    public String getOrderNo() {
      return "A-1";
    }
  }

  /** A sealed payload type: its subclasses are all known at start-up. */
  public static sealed class Refund permits PartialRefund {}

  public static final class PartialRefund extends Refund {
    public String getRefundNo() {
      return "R-1";
    }
  }

  static class HeaderNameInKey {
    @Idempotent(bizType = "payment", key = "order-no")
    @KafkaListener(topics = "t")
    public void charge(String payload) {}
  }

  static class BareProperty {
    @Idempotent(bizType = "payment", key = "orderNo")
    @KafkaListener(topics = "t")
    public void charge(Order order) {}
  }

  static class BareNameInConcatenation {
    @Idempotent(bizType = "payment", key = "#headers['tenant'] + ':' + eventId")
    @KafkaListener(topics = "t")
    public void charge(Event event) {}
  }

  static class VariableWithoutHash {
    @Idempotent(bizType = "payment", key = "payload.orderNo")
    @KafkaListener(topics = "t")
    public void charge(Order order) {}
  }

  static class MissingPayloadProperty {
    @Idempotent(bizType = "payment", key = "#payload.orderNumber")
    @KafkaListener(topics = "t")
    public void charge(Order order) {}
  }

  static class MissingNestedProperty {
    @Idempotent(bizType = "payment", key = "#payload.customer.idd")
    @KafkaListener(topics = "t")
    public void charge(Message<Order> order) {}
  }

  static class FieldOfJsonTree {
    @Idempotent(bizType = "payment", key = "#payload.orderNo")
    @KafkaListener(topics = "t")
    public void charge(JsonNode payload) {}
  }

  static class PropertyOfStringPayload {
    @Idempotent(bizType = "payment", key = "#payload.orderNo")
    @KafkaListener(topics = "t")
    public void charge(ConsumerRecord<String, String> record) {}
  }

  static class BatchOfOrders {
    @Idempotent(bizType = "payment", key = "#payload.orderNumber")
    @KafkaListener(topics = "t", batch = "true")
    public void charge(List<ConsumerRecord<String, Order>> records) {}
  }

  static class MisspelledPayload {
    @Idempotent(bizType = "payment", key = "#paylod.orderNo")
    @KafkaListener(topics = "t")
    public void charge(Order order) {}
  }

  static class SingularHeaders {
    @Idempotent(bizType = "payment", key = "#header['order-no']")
    @KafkaListener(topics = "t")
    public void charge(Order order) {}
  }

  static class BareFingerprint {
    @Idempotent(bizType = "payment", header = "order-no", fingerprint = "amount")
    @KafkaListener(topics = "t")
    public void charge(Order order) {}
  }

  static class Unparsable {
    @Idempotent(bizType = "payment", key = "#headers['order-no'")
    @KafkaListener(topics = "t")
    public void charge(Order order) {}
  }

  /** The forms README.md and docs/ show, and others that read only what exists. */
  static class DocumentedForms {
    @Idempotent(bizType = "payment", header = "order-no")
    @KafkaListener(topics = "t")
    public void byHeader(ConsumerRecord<String, String> record) {}

    @Idempotent(bizType = "order", key = "#payload.orderNo", fingerprint = "#payload.amount")
    @KafkaListener(topics = "t")
    public void byPayloadProperty(Order order) {}

    @Idempotent(bizType = "tenant-order", key = "#headers['tenant'] + ':' + #headers['order-no']")
    @KafkaListener(topics = "t")
    public void byHeaders(String payload) {}

    @Idempotent(bizType = "substring", key = "#payload.substring(8)")
    @KafkaListener(topics = "t")
    public void byMethodOfStringPayload(String payload) {}

    @Idempotent(bizType = "whole", key = "#payload", fingerprint = "#record.value()")
    @KafkaListener(topics = "t")
    public void byWholePayload(String payload) {}

    @Idempotent(bizType = "nested", key = "#payload.customer.id + ':' + #payload?.orderNo")
    @KafkaListener(topics = "t")
    public void byNestedProperty(Order order) {}

    @Idempotent(bizType = "record", key = "#topic + '@' + #record.offset + ':' + #record.key")
    @KafkaListener(topics = "t")
    public void byRecord(ConsumerRecord<String, String> record) {}

    @Idempotent(bizType = "random", key = "T(java.util.UUID).randomUUID().toString()")
    @KafkaListener(topics = "t")
    public void byStaticMethod(String payload) {}

    @Idempotent(bizType = "bean", key = "@keys.of(#payload)")
    @KafkaListener(topics = "t")
    public void byBean(String payload) {}

    @Idempotent(bizType = "index-name", key = "#headers[tenant]")
    @KafkaListener(topics = "t")
    public void byBareIndexName(String payload) {}
  }

  /** Payload types whose properties are known only at run time: not refused. */
  static class PayloadOfUnknownType {
    @Idempotent(bizType = "object", key = "#payload.orderNumber")
    @KafkaListener(topics = "t")
    public void ofObject(Object payload) {}

    @Idempotent(bizType = "interface", key = "#payload.orderNumber")
    @KafkaListener(topics = "t")
    public void ofInterface(Event event) {}

    @Idempotent(bizType = "map", key = "#payload['orderNumber']")
    @KafkaListener(topics = "t")
    public void ofMap(Map<String, Object> payload) {}

    @Idempotent(bizType = "map-property", key = "#payload.orderNumber")
    @KafkaListener(topics = "t")
    public void ofMapByProperty(Map<String, Object> payload) {}

    @Idempotent(bizType = "json", key = "#payload.get('orderNumber').asString()")
    @KafkaListener(topics = "t")
    public void ofJson(JsonNode payload) {}

    @Idempotent(bizType = "wildcard", key = "#payload.orderNumber")
    @KafkaListener(topics = "t")
    public void ofMessageOfAnything(Message<?> message) {}

    @Idempotent(bizType = "untyped-record", key = "#payload.orderNumber")
    @KafkaListener(topics = "t")
    public void ofRecordValue(ConsumerRecord<String, ?> record) {}
  }

  static class BatchOfMessages {
    @Idempotent(bizType = "payment", key = "#payload.orderNo")
    @KafkaListener(topics = "t", batch = "true")
    public void charge(List<Message<Order>> messages) {}
  }

  static class PropertyOfADeclaredSubtype {
    @Idempotent(bizType = "payment", key = "#payload.orderNo")
    @KafkaListener(topics = "t")
    public void charge(Payment payment) {}

    @Idempotent(bizType = "refund", key = "#payload.refundNo")
    @KafkaListener(topics = "r")
    public void refund(Refund refund) {}
  }

  static class PropertyNoSubtypeHas {
    @Idempotent(bizType = "payment", key = "#payload.ordrNo")
    @KafkaListener(topics = "t")
    public void charge(Payment payment) {}
  }

  static class GenericEnvelope {
    @Idempotent(bizType = "payment", key = "#payload.data.customer.id")
    @KafkaListener(topics = "t")
    public void charge(Envelope<Order> envelope) {}
  }
}
