package io.consumerdedup.spring;

import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.InProgressPolicy;
import io.consumerdedup.kafka.MissingKeyPolicy;
import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Makes a {@code @KafkaListener} (or {@code @KafkaHandler}) method apply each business action once:
 * the method runs through the core's {@link io.consumerdedup.core.IdempotentExecutor} under the key
 * {@code (bizType, business key)}, and a delivery whose key already succeeded is skipped.
 *
 * <pre>{@code
 * @Idempotent(bizType = "payment", header = "order-no")
 * @KafkaListener(topics = "payments")
 * void charge(Payment payment) { ... }
 *
 * @Idempotent(bizType = "refund", key = "#payload.refundId")
 * @KafkaListener(topics = "refunds")
 * void refund(Refund refund) { ... }
 * }</pre>
 *
 * <p>Give exactly one of {@link #header()} and {@link #key()}. Settings left empty take the
 * application's {@code consumer-dedup.*} properties.
 */
@Target(ElementType.METHOD)
@Retention(RetentionPolicy.RUNTIME)
@Documented
public @interface Idempotent {

  /** The kind of business action, such as {@code payment}: one per consumer of an event. */
  String bizType();

  /** The record header that carries the business key, decoded strictly as UTF-8. */
  String header() default "";

  /**
   * A SpEL expression giving the business key, over {@code #record} (the {@code ConsumerRecord}),
   * {@code #headers} (header name to its last value, strictly decoded UTF-8), {@code #payload} (the
   * converted payload) and {@code #topic}. An {@code Optional} stands for what it holds, bytes are
   * strictly decoded as UTF-8, anything else is its {@code toString()} unless that is {@code
   * Object}'s (a malformed key). A null or empty result is a missing key.
   */
  String key() default "";

  /**
   * A SpEL expression (same variables as {@link #key()}) whose value identifies the payload; its
   * SHA-256 is stored with the key, and a later delivery under the key with another value is
   * refused as a conflict. Bytes are hashed as they are, other values as their text, as {@link
   * #key()} takes it. Default: payloads are not compared.
   */
  String fingerprint() default "";

  /**
   * The lease for this listener, as a Spring Boot duration ({@code 30s}, {@code 10m}, ISO-8601; a
   * bare number means seconds, as in {@code consumer-dedup.lease}), at least 1s. Default: {@code
   * consumer-dedup.lease}.
   */
  String lease() default "";

  /** What to do with a record without a key. Default: {@code consumer-dedup.missing-key-policy}. */
  MissingKeyPolicy[] missingKeyPolicy() default {};

  /**
   * Reaction to another consumer's live lease. Default: {@code consumer-dedup.in-progress-policy}.
   */
  InProgressPolicy[] inProgressPolicy() default {};

  /**
   * {@link DedupMode#TRANSACTIONAL} joins the listener's Spring transaction on the dedup table's
   * DataSource. Default: {@code consumer-dedup.mode}.
   */
  DedupMode[] mode() default {};
}
