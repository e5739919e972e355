package io.consumerdedup.docs.kafka;

// tag::quick-start[]
import static java.util.Map.entry;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.kafka.DedupPollLoop;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.KafkaDeadLetterPublisher;
import io.consumerdedup.kafka.KeyExtractors;
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

/** Charges each order once, however often Kafka delivers its payment. */
public final class Billing implements AutoCloseable {
  private static final Logger log = LoggerFactory.getLogger(Billing.class);

  private final IdempotentExecutor executor;
  private final Producer<String, String> dltProducer;
  private final Producer<byte[], byte[]> rawDltProducer; // for records that cannot be deserialized
  private final DedupPollLoop<String, String> loop;
  private final ExecutorService loopThread = Executors.newSingleThreadExecutor();

  public static void main(String[] args) {
    HikariDataSource dataSource = new HikariDataSource(); // the database of the dedup table
    dataSource.setJdbcUrl("jdbc:postgresql://localhost:5432/billing?user=billing");
    Billing billing = new Billing("localhost:9092", dataSource);
    Runtime.getRuntime().addShutdownHook(new Thread(billing::close));
  }

  Billing(String bootstrapServers, DataSource dataSource) {
    Map<String, Object> consumerConfig =
        Map.ofEntries(
            entry(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers),
            entry(ConsumerConfig.GROUP_ID_CONFIG, "billing"),
            entry(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false), // required: the loop commits
            entry(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest"),
            entry(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class),
            entry(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class));
    Map<String, Object> producerConfig = // for the dead-letter topic
        Map.ofEntries(
            entry(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers),
            entry(ProducerConfig.ACKS_CONFIG, "all"),
            entry(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class),
            entry(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class));

    executor = IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build()).build();
    IdempotentRecordHandler<String, String> payments =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType("payment") // one biz type per kind of action
            .key(KeyExtractors.header("order-no")) // the business key, from a header
            .groupId("billing") // named in errors and in the table
            .handler(record -> charge(record.value())) // applied once per order-no
            .build();

    dltProducer = new KafkaProducer<>(producerConfig);
    rawDltProducer =
        new KafkaProducer<>(producerConfig, new ByteArraySerializer(), new ByteArraySerializer());
    loop =
        DedupPollLoop.builder(consumerConfig, List.of("payments"), payments)
            .deadLetterHandler(
                KafkaDeadLetterPublisher.builder(dltProducer)
                    .rawProducer(rawDltProducer)
                    .groupId("billing")
                    .build())
            .build();
    loopThread.execute(loop);
  }

  /** Your side effect. */
  static void charge(String amount) {
    log.info("Charging {}", amount);
  }

  /** Stops polling, finishes the record in hand, commits, then closes what the loop used. */
  @Override
  public void close() {
    loop.close();
    loopThread.shutdown();
    dltProducer.close();
    rawDltProducer.close();
    executor.close();
  }
}
// end::quick-start[]
