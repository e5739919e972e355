package io.consumerdedup.kafka;

import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.AcknowledgementCommitCallback;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What {@link DedupShareLoop} requires of its share consumer: a share group, explicit
 * acknowledgement, kafka-clients 4.2 or later; and how it hears of acknowledgements the broker
 * refused.
 */
final class ShareConsumerConfig {
  private static final Logger log = LoggerFactory.getLogger(ShareConsumerConfig.class);

  private static final String ACKNOWLEDGEMENT_MODE = "share.acknowledgement.mode";

  private ShareConsumerConfig() {}

  /**
   * The share group that {@code consumerConfig} names.
   *
   * @throws IllegalArgumentException it names none
   */
  static String groupOf(Map<String, Object> consumerConfig) {
    Object group = consumerConfig.get(ConsumerConfig.GROUP_ID_CONFIG);
    if (group == null || group.toString().isBlank()) {
      throw new IllegalArgumentException(
          "consumerConfig must name the share group: group.id is missing");
    }
    return group.toString();
  }

  /**
   * A copy of {@code consumerConfig} in explicit acknowledgement mode.
   *
   * @throws IllegalArgumentException it asks for implicit acknowledgement
   */
  static Map<String, Object> explicitAcknowledgement(Map<String, Object> consumerConfig) {
    Object mode = consumerConfig.get(ACKNOWLEDGEMENT_MODE);
    if (mode != null && !"explicit".equalsIgnoreCase(mode.toString())) {
      throw new IllegalArgumentException(
          "share.acknowledgement.mode must be explicit (or absent): the loop acknowledges each"
              + " record by its outcome, was "
              + mode);
    }
    Map<String, Object> config = new HashMap<>(consumerConfig);
    config.put(ACKNOWLEDGEMENT_MODE, "explicit");
    return config;
  }

  /**
   * @throws IllegalStateException kafka-clients is older than 4.2: without {@code
   *     AcknowledgeType.RENEW} a waiting record would use up its deliveries
   */
  static void requireRenew() {
    if (Arrays.stream(AcknowledgeType.values()).noneMatch(t -> t.name().equals("RENEW"))) {
      throw new IllegalStateException(
          "DedupShareLoop needs kafka-clients 4.2 or later (AcknowledgeType.RENEW, to keep a"
              + " record acquired while it waits or its handler runs); this application has an"
              + " older one");
    }
  }

  /** Logs the acknowledgements of share group {@code groupId} that the broker refused. */
  static AcknowledgementCommitCallback loggingRefusals(String groupId) {
    return (offsets, exception) -> {
      if (exception != null) {
        // A record whose lock ran out before its acknowledgement arrived: the broker delivers it
        // again, and the dedup table answers that delivery.
        log.warn(
            "The broker refused acknowledgements of {} in share group {}: {}",
            offsets,
            groupId,
            exception.toString());
      }
    };
  }
}
