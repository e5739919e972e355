package io.consumerdedup.spring.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.kafka.MissingKeyPolicy;
import io.consumerdedup.spring.listener.IdempotentRecordInterceptor;
import io.consumerdedup.testing.TestDatabase;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Test;
import org.springframework.kafka.listener.RecordInterceptor;

/** The application's record interceptor composed with consumer-dedup's, which runs second. */
class GuardedRecordInterceptorTest {
  private final MockConsumer<String, String> consumer = new MockConsumer<>("earliest");

  /**
   * The listener threw an Error, so the container never reports the record's end, and stops; the
   * application's interceptor then throws an Error of its own as the consumer thread clears its
   * state. consumer-dedup's must still end the claim: skipped, it left the key PROCESSING under a
   * lease the executor kept renewing, holding every copy of the key until a restart.
   */
  @Test
  void anErrorOfTheFirstWhenTheThreadStateIsClearedStillEndsTheSecondsOpenClaim() {
    String schema = TestDatabase.newSchema("guarded_interceptor");
    try (HikariDataSource pool = TestDatabase.dataSource(schema, 2);
        IdempotentExecutor executor =
            IdempotentExecutor.builder(JdbcDedupStore.builder(pool).build()).build()) {
      RecordInterceptor<String, String> application =
          new RecordInterceptor<>() {
            @Override
            public ConsumerRecord<String, String> intercept(
                ConsumerRecord<String, String> record, Consumer<String, String> consumer) {
              return record;
            }

            @Override
            public void clearThreadState(Consumer<?, ?> consumer) {
              throw new ApplicationError("the application's interceptor failed");
            }
          };
      RecordInterceptor<String, String> guarded =
          new GuardedRecordInterceptor<>(
              application,
              new IdempotentRecordInterceptor<>(
                  executor,
                  "payment",
                  IdempotentRecordInterceptor.DEFAULT_KEY_HEADER,
                  MissingKeyPolicy.FAIL,
                  "payments"));
      ConsumerRecord<String, String> record =
          new ConsumerRecord<>("payments", 0, 7, null, "pay 10");
      record
          .headers()
          .add(
              IdempotentRecordInterceptor.DEFAULT_KEY_HEADER,
              "P-7".getBytes(StandardCharsets.UTF_8));

      assertThat(guarded.intercept(record, consumer)).isSameAs(record);
      // The listener throws an Error here: no success, failure or afterRecord. The application's
      // Error is thrown as the thread sets up its next poll, where spring-kafka stops the
      // container cleanly.
      guarded.clearThreadState(consumer);
      assertThatThrownBy(() -> guarded.setupThreadState(consumer))
          .isInstanceOf(ApplicationError.class)
          .hasNoSuppressedExceptions();

      DedupRecord claimed = executor.store().find(DedupKey.of("payment", "P-7")).orElseThrow();
      assertThat(claimed.status()).isEqualTo(DedupStatus.FAILED);
      assertThat(claimed.lastError())
          .get()
          .asString()
          .contains("never reported the end of the record");
    } finally {
      TestDatabase.dropSchema(schema);
    }
  }

  @Test
  void whenBothThrowTheFirstsIsRethrownWithTheSecondsSuppressed() {
    List<String> calls = new ArrayList<>();
    ApplicationError first = new ApplicationError("first");
    IllegalStateException second = new IllegalStateException("second");
    RecordInterceptor<String, String> guarded =
        new GuardedRecordInterceptor<>(
            throwingAfterRecord("first", first, calls),
            throwingAfterRecord("second", second, calls));

    assertThatThrownBy(() -> guarded.afterRecord(record(), consumer))
        .isSameAs(first)
        .satisfies(thrown -> assertThat(thrown.getSuppressed()).containsExactly(second));
    assertThat(calls).containsExactly("first", "second");
  }

  @Test
  void whenOnlyTheSecondThrowsItsIsRethrown() {
    List<String> calls = new ArrayList<>();
    ApplicationError second = new ApplicationError("second");
    RecordInterceptor<String, String> guarded =
        new GuardedRecordInterceptor<>(
            throwingAfterRecord("first", null, calls),
            throwingAfterRecord("second", second, calls));

    assertThatThrownBy(() -> guarded.afterRecord(record(), consumer)).isSameAs(second);
    assertThat(calls).containsExactly("first", "second");
  }

  private static ConsumerRecord<String, String> record() {
    return new ConsumerRecord<>("payments", 0, 3, null, "pay 3");
  }

  /**
   * An interceptor that notes its {@code afterRecord} call as {@code name}, then throws, if given.
   */
  private static RecordInterceptor<String, String> throwingAfterRecord(
      String name, @Nullable Throwable thrown, List<String> calls) {
    return new RecordInterceptor<>() {
      @Override
      public ConsumerRecord<String, String> intercept(
          ConsumerRecord<String, String> record, Consumer<String, String> consumer) {
        return record;
      }

      @Override
      public void afterRecord(
          ConsumerRecord<String, String> record, Consumer<String, String> consumer) {
        calls.add(name);
        if (thrown instanceof Error error) {
          throw error;
        }
        if (thrown instanceof RuntimeException exception) {
          throw exception;
        }
      }
    };
  }

  /** An Error of the application's, not one the JVM throws. */
  private static final class ApplicationError extends Error {
    ApplicationError(String message) {
      super(message);
    }
  }
}
