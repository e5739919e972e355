package io.consumerdedup.bench;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.kafka.DedupPollLoop;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.KeyExtractors;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * A consumer of the crash-window run, in a JVM of its own that {@link CrashWindow} kills: the quick
 * start's loop in mode SEPARATE, whose handler writes its effect as a row of {@code crash_effects}
 * (no unique key, on a connection of its own, committed at once), so a handler that runs twice for
 * one key leaves two rows.
 *
 * <p>Arguments: bootstrap servers, JDBC URL, topic, group, claims per poll ({@code true} or {@code
 * false}), lease in milliseconds, handler time in milliseconds. Prints {@code APPLIED} after its
 * first effect.
 */
public final class CrashWindowChild {
  private CrashWindowChild() {}

  public static void main(String[] args) throws Exception {
    String bootstrapServers = args[0];
    String jdbcUrl = args[1];
    String topic = args[2];
    String group = args[3];
    boolean claimsPerPoll = Boolean.parseBoolean(args[4]);
    Duration lease = Duration.ofMillis(Long.parseLong(args[5]));
    long handlerMillis = Long.parseLong(args[6]);

    HikariDataSource dedupPool = pool(jdbcUrl, "crash-window-dedup", 4);
    HikariDataSource effectsPool = pool(jdbcUrl, "crash-window-effects", 1);
    IdempotentExecutor executor =
        IdempotentExecutor.builder(JdbcDedupStore.builder(dedupPool).build()).lease(lease).build();
    AtomicBoolean announced = new AtomicBoolean();
    IdempotentRecordHandler<String, String> handler =
        IdempotentRecordHandler.<String, String>builder(executor)
            .bizType(DedupTable.BIZ_TYPE)
            .key(KeyExtractors.header(Workload.ORDER_NO_HEADER))
            .groupId(group)
            .claimsPerPoll(claimsPerPoll)
            .handler(
                record -> {
                  Thread.sleep(handlerMillis);
                  try (Connection connection = effectsPool.getConnection();
                      PreparedStatement effect =
                          connection.prepareStatement(
                              "INSERT INTO crash_effects (order_no) VALUES (?)")) {
                    effect.setString(1, Workload.orderNo(record));
                    effect.executeUpdate();
                  }
                  if (announced.compareAndSet(false, true)) {
                    System.out.println("APPLIED");
                    System.out.flush();
                  }
                })
            .build();
    DedupPollLoop<String, String> loop =
        DedupPollLoop.builder(
                Map.of(
                    ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG,
                    bootstrapServers,
                    ConsumerConfig.GROUP_ID_CONFIG,
                    group,
                    ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG,
                    false,
                    ConsumerConfig.AUTO_OFFSET_RESET_CONFIG,
                    "earliest",
                    // Static membership: the next consumer takes the killed one's place at once,
                    // instead of waiting out its session.
                    ConsumerConfig.GROUP_INSTANCE_ID_CONFIG,
                    "crash-window-consumer",
                    ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG,
                    StringDeserializer.class,
                    ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                    StringDeserializer.class),
                List.of(topic),
                handler)
            .deadLetterHandler(
                (record, reason) -> System.out.println("DEAD-LETTERED " + record + ": " + reason))
            .build();
    loop.run(); // until killed
  }

  private static HikariDataSource pool(String jdbcUrl, String name, int size) {
    HikariConfig config = new HikariConfig();
    config.setJdbcUrl(jdbcUrl);
    config.setPoolName(name);
    config.setMaximumPoolSize(size);
    return new HikariDataSource(config);
  }
}
