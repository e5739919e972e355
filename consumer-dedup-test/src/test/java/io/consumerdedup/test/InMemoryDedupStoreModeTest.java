package io.consumerdedup.test;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatCode;
import static org.assertj.core.api.Assertions.catchThrowable;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupMode;
import io.consumerdedup.core.IdempotentExecutor;
import org.junit.jupiter.api.Test;

/**
 * The in-memory store cannot keep mode TRANSACTIONAL's promise: an executor built on it in that
 * mode stops where it is built, as the JDBC store stops an application that cannot keep it, rather
 * than failing each record as if its handler had failed.
 */
class InMemoryDedupStoreModeTest {

  @Test
  void anExecutorInModeTransactionalIsRefusedWhereItIsBuiltNamingTheJdbcStore() {
    Throwable refused =
        catchThrowable(
            () ->
                IdempotentExecutor.builder(new InMemoryDedupStore())
                    .mode(DedupMode.TRANSACTIONAL)
                    .build());

    assertThat(refused)
        .as("building an executor in mode TRANSACTIONAL on the in-memory store")
        .isInstanceOf(DedupConfigurationException.class)
        .hasMessageContaining("TRANSACTIONAL")
        .hasMessageContaining("JdbcDedupStore");
  }

  @Test
  void anExecutorInModeSeparateIsBuilt() {
    assertThatCode(
            () ->
                IdempotentExecutor.builder(new InMemoryDedupStore())
                    .mode(DedupMode.SEPARATE)
                    .build())
        .doesNotThrowAnyException();
  }
}
