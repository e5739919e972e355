package io.consumerdedup.examples.kafka;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Publishes the scenarios' events, each with its business key in a header, and waits for the ack.
 */
public final class Events implements AutoCloseable {
  private final KafkaProducer<String, String> producer;

  public Events(String bootstrapServers) {
    Properties properties = new Properties();
    properties.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers);
    properties.put(ProducerConfig.ACKS_CONFIG, "all");
    this.producer = new KafkaProducer<>(properties, new StringSerializer(), new StringSerializer());
  }

  /**
   * Sends one event to partition 0 of {@code topic} with the header {@code keyHeader: key}.
   *
   * @return its offset
   */
  public long send(String topic, String keyHeader, String key, String value)
      throws InterruptedException {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, 0, key, value);
    record.headers().add(keyHeader, key.getBytes(StandardCharsets.UTF_8));
    try {
      RecordMetadata metadata = producer.send(record).get();
      return metadata.offset();
    } catch (ExecutionException e) {
      throw new IllegalStateException("Could not send " + key + " to " + topic, e.getCause());
    }
  }

  @Override
  public void close() {
    producer.close(Duration.ofSeconds(5));
  }
}
