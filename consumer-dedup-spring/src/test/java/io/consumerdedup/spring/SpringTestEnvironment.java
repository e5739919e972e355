package io.consumerdedup.spring;

import io.consumerdedup.micrometer.MicrometerDedupListener;
import io.consumerdedup.testing.TestDatabase;
import io.consumerdedup.testing.TestKafka;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.MeterRegistry;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.function.UnaryOperator;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.jspecify.annotations.Nullable;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.kafka.core.KafkaOperations;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.BatchInterceptor;
import org.springframework.kafka.listener.DeadLetterPublishingRecoverer;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.RecordInterceptor;
import org.springframework.kafka.test.utils.KafkaTestUtils;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.util.backoff.FixedBackOff;

/**
 * A fresh PostgreSQL schema (dedup table plus an {@code effects} table that listeners write their
 * side effects to) and the topics of one Spring Boot test class, on the in-JVM KRaft broker that
 * every test class of the JVM shares ({@link TestKafka}): starting a broker per class cost more
 * than a second each. Sharing it, each class uses topic and group names of its own, so that no
 * class sees another's records or offsets.
 */
final class SpringTestEnvironment {
  private SpringTestEnvironment() {}

  /**
   * Creates the schema and the {@code topics} (one partition each) and points the application at
   * them.
   */
  static String prepare(DynamicPropertyRegistry registry, String prefix, String... topics) {
    return prepare(registry, prefix, UnaryOperator.identity(), 1, topics);
  }

  /**
   * Creates the schema and the {@code topics} and points the application at them, at the schema
   * through {@code route} (which may send the JDBC URL through a fault-injecting proxy).
   */
  static String prepare(
      DynamicPropertyRegistry registry,
      String prefix,
      UnaryOperator<String> route,
      int partitions,
      String... topics) {
    TestKafka.createTopics(partitions, topics);
    String schema = TestDatabase.newSchema(prefix);
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute(
          "CREATE TABLE effects (listener text NOT NULL, biz_key text, payload text,"
              + " at timestamptz NOT NULL DEFAULT clock_timestamp())");
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
    registry.add("spring.datasource.url", () -> route.apply(TestDatabase.url(schema)));
    prepareKafka(registry);
    return schema;
  }

  /**
   * Points the application at the shared broker, where the caller has created its topics, and at a
   * database it prepared itself (MariaDB, say) through {@code spring.datasource.url}.
   */
  static void prepareKafka(DynamicPropertyRegistry registry) {
    registry.add("spring.kafka.bootstrap-servers", TestKafka::bootstrapServers);
    registry.add("spring.datasource.hikari.maximum-pool-size", () -> "6");
    registry.add("spring.kafka.consumer.auto-offset-reset", () -> "earliest");
    registry.add("spring.kafka.consumer.properties.max.poll.interval.ms", () -> "60000");
    registry.add("consumer-dedup.cleanup.enabled", () -> "false");
  }

  /**
   * Has the database refuse, as a transient failure, the SUCCESS of every key listed in the
   * schema's table {@code mark_faults} (insert a key to refuse it, delete it to let it through),
   * counting each refusal ({@link #refusedSuccesses}), and each refusal of a key listed by {@link
   * #refuseSuccessOf} apart ({@link #refusedSuccessesOf}): a sequence, because the refused
   * transaction rolls back anything else it writes.
   */
  static void refuseListedSuccesses(String schema) {
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute("CREATE TABLE mark_faults (biz_key text PRIMARY KEY)");
      statement.execute("CREATE SEQUENCE mark_fault_hits");
      statement.execute(
          "CREATE FUNCTION refuse_marks() RETURNS trigger AS $$ BEGIN"
              + " IF NEW.status = 'SUCCESS' AND EXISTS (SELECT 1 FROM mark_faults f"
              + " WHERE f.biz_key = NEW.biz_key) THEN"
              + " PERFORM nextval('mark_fault_hits');"
              + " IF to_regclass('hits_' || md5(NEW.biz_key)) IS NOT NULL THEN"
              + " PERFORM nextval(('hits_' || md5(NEW.biz_key))::regclass); END IF;"
              + " RAISE EXCEPTION 'injected: SUCCESS of % refused', NEW.biz_key"
              + " USING ERRCODE = '40001'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql");
      statement.execute(
          "CREATE TRIGGER refuse_marks BEFORE UPDATE ON consumer_dedup FOR EACH ROW"
              + " EXECUTE FUNCTION refuse_marks()");
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
  }

  /** How many SUCCESS writes {@link #refuseListedSuccesses} refused so far. */
  static long refusedSuccesses(JdbcTemplate jdbc) {
    Long hits =
        jdbc.queryForObject(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM mark_fault_hits",
            Long.class);
    return hits == null ? 0 : hits;
  }

  /** Has the database refuse the SUCCESS of {@code bizKey}, counting its refusals apart. */
  static void refuseSuccessOf(JdbcTemplate jdbc, String bizKey) {
    jdbc.execute("CREATE SEQUENCE IF NOT EXISTS " + hitsOf(jdbc, bizKey));
    jdbc.update("INSERT INTO mark_faults (biz_key) VALUES (?)", bizKey);
  }

  /** How many SUCCESS writes of {@code bizKey} {@link #refuseSuccessOf} had refused so far. */
  static long refusedSuccessesOf(JdbcTemplate jdbc, String bizKey) {
    Long hits =
        jdbc.queryForObject(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM " + hitsOf(jdbc, bizKey),
            Long.class);
    return hits == null ? 0 : hits;
  }

  private static String hitsOf(JdbcTemplate jdbc, String bizKey) {
    return jdbc.queryForObject("SELECT 'hits_' || md5(?)", String.class, bizKey);
  }

  /**
   * Notes, for each transaction that writes the dedup table of {@code schema}, the biz types and
   * statuses of the rows it inserts or proposes to insert (a claim proposes PROCESSING, a SUCCESS
   * mark SUCCESS), so that {@link #transactions} counts the claim and mark transactions of a biz
   * type, whatever their statements look like.
   */
  static void noteDedupTransactions(String schema) {
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute(
          "CREATE TABLE dedup_transactions (xid bigint NOT NULL, biz_type text NOT NULL,"
              + " status text NOT NULL, PRIMARY KEY (xid, biz_type, status))");
      statement.execute(
          "CREATE FUNCTION note_dedup_transaction() RETURNS trigger AS $$ BEGIN"
              + " INSERT INTO dedup_transactions VALUES (txid_current(), NEW.biz_type, NEW.status)"
              + " ON CONFLICT DO NOTHING; RETURN NEW; END $$ LANGUAGE plpgsql");
      statement.execute(
          "CREATE TRIGGER note_dedup_transaction BEFORE INSERT ON consumer_dedup FOR EACH ROW"
              + " EXECUTE FUNCTION note_dedup_transaction()");
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
  }

  /**
   * How many transactions wrote rows of {@code bizType} as {@code status} ({@code PROCESSING}: the
   * claims), as {@link #noteDedupTransactions} noted them.
   */
  static int transactions(JdbcTemplate jdbc, String bizType, String status) {
    Integer count =
        jdbc.queryForObject(
            "SELECT count(DISTINCT xid) FROM dedup_transactions WHERE biz_type = ? AND status = ?",
            Integer.class,
            bizType,
            status);
    return count == null ? 0 : count;
  }

  /** Sends {@code value} with the {@code headers} (name, value, ...) and returns its offset. */
  static long send(
      KafkaTemplate<String, String> template, String topic, String value, String... headers)
      throws Exception {
    ProducerRecord<String, String> record = new ProducerRecord<>(topic, value);
    for (int i = 0; i < headers.length; i += 2) {
      record.headers().add(headers[i], headers[i + 1].getBytes(StandardCharsets.UTF_8));
    }
    return template.send(record).get().getRecordMetadata().offset();
  }

  /**
   * The usual error handler of an application: a failed record is tried {@code retries} more times,
   * {@code intervalMillis} apart, then published to {@code <topic>-dlt}.
   */
  static DefaultErrorHandler deadLettering(
      KafkaOperations<?, ?> template, long intervalMillis, long retries) {
    return new DefaultErrorHandler(
        new DeadLetterPublishingRecoverer(template), new FixedBackOff(intervalMillis, retries));
  }

  /**
   * {@link #deadLettering(KafkaOperations, long, long)} that tells {@code published} of each record
   * once the broker took its dead letter, so that a test can stop waiting then.
   */
  static DefaultErrorHandler deadLettering(
      KafkaOperations<?, ?> template,
      long intervalMillis,
      long retries,
      java.util.function.Consumer<ConsumerRecord<?, ?>> published) {
    DeadLetterPublishingRecoverer publisher = new DeadLetterPublishingRecoverer(template);
    return new DefaultErrorHandler(
        (record, error) -> {
          publisher.accept(record, error);
          published.accept(record);
        },
        new FixedBackOff(intervalMillis, retries));
  }

  /** The offset {@code group} committed for {@code topic}'s {@code partition}, -1 if none. */
  static long committed(String group, String topic, int partition) throws Exception {
    OffsetAndMetadata offset =
        KafkaTestUtils.getCurrentOffset(TestKafka.bootstrapServers(), group, topic, partition);
    return offset == null ? -1 : offset.offset();
  }

  /**
   * Reads every record of {@code topic} from the beginning, until {@code count} have arrived or
   * {@code timeout} passed.
   */
  static List<ConsumerRecord<String, String>> readTopic(String topic, int count, Duration timeout) {
    List<ConsumerRecord<String, String>> records = new ArrayList<>();
    try (KafkaConsumer<String, String> consumer =
        new KafkaConsumer<>(
            Map.of(
                ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG,
                TestKafka.bootstrapServers(),
                ConsumerConfig.GROUP_ID_CONFIG,
                "reader-" + UUID.randomUUID(),
                ConsumerConfig.AUTO_OFFSET_RESET_CONFIG,
                "earliest"),
            new StringDeserializer(),
            new StringDeserializer())) {
      consumer.subscribe(List.of(topic));
      long deadline = System.nanoTime() + timeout.toNanos();
      while (records.size() < count && System.nanoTime() < deadline) {
        consumer.poll(Duration.ofMillis(200)).forEach(records::add);
      }
    }
    return records;
  }

  /** {@link TestKafka#readWritten(String, String)}. */
  static List<ConsumerRecord<String, String>> readWritten(String topic, String isolation) {
    return TestKafka.readWritten(topic, isolation);
  }

  /**
   * A record interceptor that adds what each failed listener call threw, with every cause, one per
   * line, to {@code failures}.
   */
  static RecordInterceptor<Object, Object> failureRecorder(List<String> failures) {
    return new RecordInterceptor<>() {
      @Override
      public ConsumerRecord<Object, Object> intercept(
          ConsumerRecord<Object, Object> record, Consumer<Object, Object> consumer) {
        return record;
      }

      @Override
      public void failure(
          ConsumerRecord<Object, Object> record,
          Exception exception,
          Consumer<Object, Object> consumer) {
        failures.add(causes(exception));
      }
    };
  }

  /**
   * {@link #failureRecorder}'s batch listener twin: what each failed batch threw, with every cause.
   */
  static BatchInterceptor<Object, Object> batchFailureRecorder(List<String> failures) {
    return new BatchInterceptor<>() {
      @Override
      public ConsumerRecords<Object, Object> intercept(
          ConsumerRecords<Object, Object> records, Consumer<Object, Object> consumer) {
        return records;
      }

      @Override
      public void failure(
          ConsumerRecords<Object, Object> records,
          Exception exception,
          Consumer<Object, Object> consumer) {
        failures.add(causes(exception));
      }
    };
  }

  /** {@code error} and its causes, one per line. */
  static String causes(Throwable error) {
    StringBuilder text = new StringBuilder();
    for (Throwable t = error; t != null; t = t.getCause()) {
      text.append(t).append('\n');
    }
    return text.toString();
  }

  static String header(ConsumerRecord<?, ?> record, String name) {
    Header header = record.headers().lastHeader(name);
    return header == null ? "" : new String(header.value(), StandardCharsets.UTF_8);
  }

  /**
   * All the exception headers a DeadLetterPublishingRecoverer writes ({@code
   * kafka_dlt-exception-*}, or {@code kafka_exception-*} for retry topics), in one string.
   */
  static String deadLetterReason(ConsumerRecord<?, ?> record) {
    StringBuilder reason = new StringBuilder();
    for (Header header : record.headers()) {
      if (header.key().startsWith("kafka_dlt-exception")
          || header.key().startsWith("kafka_exception")) {
        reason.append(header.key()).append('=');
        reason.append(new String(header.value(), StandardCharsets.UTF_8)).append('\n');
      }
    }
    return reason.toString();
  }

  /**
   * Records that {@code listener} applied its effect for {@code bizKey}: a row of {@code effects}.
   */
  static void effect(
      JdbcTemplate jdbc, String listener, @Nullable String bizKey, @Nullable String payload) {
    jdbc.update(
        "INSERT INTO effects (listener, biz_key, payload) VALUES (?, ?, ?)",
        listener,
        bizKey,
        payload);
  }

  /**
   * How many effects {@code listener} wrote for {@code bizKey} (a null key matches records without
   * one).
   */
  static int effects(JdbcTemplate jdbc, String listener, @Nullable String bizKey) {
    Integer count =
        jdbc.queryForObject(
            "SELECT count(*) FROM effects WHERE listener = ? AND biz_key IS NOT DISTINCT FROM ?",
            Integer.class,
            listener,
            bizKey);
    return count == null ? 0 : count;
  }

  /** The {@code consumer.dedup.outcomes} count for one biz type and outcome; 0 if never counted. */
  static double outcomes(MeterRegistry registry, String bizType, String outcome) {
    Counter counter =
        registry
            .find(MicrometerDedupListener.OUTCOMES)
            .tag("biz_type", bizType)
            .tag("outcome", outcome)
            .counter();
    return counter == null ? 0 : counter.count();
  }
}
