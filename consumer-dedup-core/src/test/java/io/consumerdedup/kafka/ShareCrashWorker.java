package io.consumerdedup.kafka;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A share-group consumer in a child JVM whose handler announces the record it is in and then
 * blocks, to be killed there by the test (DedupShareLoopTest).
 *
 * <p>Arguments: bootstrap servers, dedup schema, topic, share group, lease in milliseconds.
 */
public final class ShareCrashWorker {
  private ShareCrashWorker() {}

  public static void main(String[] args) throws Exception {
    String bootstrap = args[0];
    HikariDataSource dataSource = TestDatabase.dataSource(args[1], 2);
    IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(dataSource).build())
            .lease(Duration.ofMillis(Long.parseLong(args[4])))
            .build();
    IdempotentRecordHandler<String, String> handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(LoopFixture.BIZ_TYPE)
            .key(KeyExtractors.header(LoopFixture.KEY_HEADER))
            .groupId(args[3])
            .handler(
                record -> {
                  String orderNo =
                      new String(
                          record.headers().lastHeader(LoopFixture.KEY_HEADER).value(),
                          StandardCharsets.UTF_8);
                  System.out.println("IN HANDLER " + orderNo);
                  System.out.flush();
                  Thread.sleep(Long.MAX_VALUE);
                })
            .build();
    KafkaProducer<String, String> dlt =
        new KafkaProducer<>(
            Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap),
            new StringSerializer(),
            new StringSerializer());
    DedupShareLoop<String, String> loop =
        DedupShareLoop.builder(
                Map.of(
                    ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG,
                    bootstrap,
                    ConsumerConfig.GROUP_ID_CONFIG,
                    args[3],
                    ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG,
                    StringDeserializer.class,
                    ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                    StringDeserializer.class),
                List.of(args[2]),
                handler)
            .deadLetterHandler(KafkaDeadLetterPublisher.builder(dlt).groupId(args[3]).build())
            .build();
    loop.run();
  }
}
