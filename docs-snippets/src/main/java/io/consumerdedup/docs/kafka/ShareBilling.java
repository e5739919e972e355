package io.consumerdedup.docs.kafka;

// tag::share-loop[]
import static java.util.Map.entry;

import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.kafka.DedupShareLoop;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.KafkaDeadLetterPublisher;
import io.consumerdedup.kafka.KeyExtractors;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import javax.sql.DataSource;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** Charges each order once from a share group: any number of instances take the same partitions. */
public final class ShareBilling implements AutoCloseable {
  private static final Logger log = LoggerFactory.getLogger(ShareBilling.class);

  private final IdempotentExecutor executor;
  private final Producer<String, String> dltProducer;
  private final Producer<byte[], byte[]> rawDltProducer;
  private final DedupShareLoop<String, String> loop;
  private final ExecutorService loopThread = Executors.newSingleThreadExecutor();

  ShareBilling(String bootstrapServers, DataSource dataSource) {
    Map<String, Object> consumerConfig =
        Map.ofEntries(
            entry(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers),
            entry(ConsumerConfig.GROUP_ID_CONFIG, "billing-queue"), // the share group
            entry(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class),
            entry(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class));
    Map<String, Object> producerConfig = // for the dead-letter topic
        Map.ofEntries(
            entry(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers),
            entry(ProducerConfig.ACKS_CONFIG, "all"),
            entry(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class),
            entry(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class));

    executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build())
            // A copy of a key whose holder died waits for the holder's lease: keep it short in
            // a share group (renewed every third while a handler runs, so handlers may be longer).
            .lease(Duration.ofSeconds(30))
            .build();
    IdempotentRecordHandler<String, String> payments =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType("payment")
            .key(KeyExtractors.header("order-no"))
            .groupId("billing-queue")
            .handler(record -> charge(record.value())) // applied once per order-no
            .build();

    dltProducer = new KafkaProducer<>(producerConfig);
    rawDltProducer =
        new KafkaProducer<>(producerConfig, new ByteArraySerializer(), new ByteArraySerializer());
    loop =
        DedupShareLoop.builder(consumerConfig, List.of("payments"), payments)
            .deadLetterHandler(
                KafkaDeadLetterPublisher.builder(dltProducer)
                    .rawProducer(rawDltProducer) // for records the deserializer rejects
                    .groupId("billing-queue")
                    .build())
            .build();
    loopThread.execute(loop);
  }

  /** Your side effect. */
  static void charge(String amount) {
    log.info("Charging {}", amount);
  }

  /** Finishes the record in hand, sends the acknowledgements, closes what the loop used. */
  @Override
  public void close() {
    loop.close();
    loopThread.shutdown();
    dltProducer.close();
    rawDltProducer.close();
    executor.close();
  }
}
// end::share-loop[]
