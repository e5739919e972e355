package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.jdbc.JdbcDedupAdmin;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.FaultyDataSource;
import io.consumerdedup.testing.TestDatabase;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.boot.actuate.endpoint.SecurityContext;
import org.springframework.boot.actuate.endpoint.web.WebEndpointResponse;
import org.springframework.jdbc.datasource.lookup.AbstractRoutingDataSource;

/**
 * The Actuator endpoint when a request holds a value the database cannot take (a NUL in a filter or
 * a cursor, a time beyond its range) or cannot be reached: the operator gets a status and the
 * reason, not an exception the web layer turns into a bare 500.
 */
class EndpointRefusedRequestsTest {
  /** The tenant a multi-tenant application's routing DataSource reads; unset on this thread. */
  private static final ThreadLocal<String> TENANT = new ThreadLocal<>();

  private String schema;
  private FaultyDataSource dataSource;
  private ConsumerDedupEndpoint endpoint;

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("endpointrefused");
    dataSource = FaultyDataSource.on(schema, 2, Duration.ofSeconds(2));
    JdbcDedupStore store = JdbcDedupStore.builder(dataSource).retryMaxAttempts(1).build();
    endpoint = new ConsumerDedupEndpoint(JdbcDedupAdmin.of(store), store, true);
  }

  @AfterEach
  void tearDown() {
    dataSource.close();
    TestDatabase.dropSchema(schema);
  }

  @Test
  void aNulInTheBizTypeFilterIsABadRequestWithTheReason() {
    WebEndpointResponse<Object> response = records("pay\0ment", null);

    assertThat(response.getStatus()).isEqualTo(400);
    assertThat(error(response)).contains("bizType").contains("NUL");
  }

  @Test
  void aCursorTheDatabaseCannotTakeIsABadRequestWithTheReason() {
    WebEndpointResponse<Object> nul = records(null, cursor("1.0\npay\0ment\nORD-1"));
    assertThat(nul.getStatus()).isEqualTo(400);
    assertThat(error(nul)).contains("Not a cursor").contains("NUL");

    WebEndpointResponse<Object> farFuture =
        records(null, cursor("9000000000000000.0\npayment\nORD-1"));
    assertThat(farFuture.getStatus()).isEqualTo(400);
    assertThat(error(farFuture)).isNotBlank();
  }

  @Test
  void whileTheDatabaseIsDownEveryOperationAnswers503WithTheReason() {
    dataSource.proxy().refuse();

    WebEndpointResponse<Object> summary = endpoint.summary();
    WebEndpointResponse<Object> list = records(null, null);
    WebEndpointResponse<Object> one =
        endpoint.read("record", null, "payment", "ORD-1", null, null, null);
    WebEndpointResponse<Object> release =
        endpoint.change("release", "payment", "ORD-1", "ops", null, SecurityContext.NONE);

    for (WebEndpointResponse<Object> response : List.of(summary, list, one, release)) {
      assertThat(response.getStatus()).isEqualTo(503);
      assertThat(error(response)).contains("Connection");
    }
  }

  /**
   * A pool closed under the application (a shutdown under way, a pool replaced on a refresh): each
   * operation answers 503 naming the closed pool.
   */
  @Test
  void aClosedPoolAnswers503NamingIt() {
    HikariDataSource pool = TestDatabase.dataSource(schema, 1);
    JdbcDedupStore store = JdbcDedupStore.builder(pool).retryMaxAttempts(1).build();
    ConsumerDedupEndpoint onPool = new ConsumerDedupEndpoint(JdbcDedupAdmin.of(store), store, true);
    assertThat(onPool.summary().getStatus()).as("summary while the pool is open").isEqualTo(200);

    pool.close();

    assertAllAnswer503Naming(onPool, "has been closed");
  }

  /**
   * A DataSource that throws a {@code RuntimeException} instead of an {@code SQLException}: here
   * Spring's {@code AbstractRoutingDataSource} of a multi-tenant application, on the Actuator's
   * thread, which carries no tenant. The exception escaped the endpoint, and the web layer answered
   * a bare 500 without the reason (an {@code IllegalArgumentException} would have answered 400, as
   * if the request were wrong).
   */
  @Test
  void aDataSourceThatThrowsARuntimeExceptionAnswers503NamingItNotABare500() {
    AbstractRoutingDataSource routing =
        new AbstractRoutingDataSource() {
          @Override
          protected Object determineCurrentLookupKey() {
            return TENANT.get();
          }
        };
    routing.setTargetDataSources(Map.of("acme", dataSource));
    routing.afterPropertiesSet();
    JdbcDedupStore store = JdbcDedupStore.builder(routing).retryMaxAttempts(1).build();
    ConsumerDedupEndpoint onRouting =
        new ConsumerDedupEndpoint(JdbcDedupAdmin.of(store), store, true);

    Throwable thrown = catchThrowable(onRouting::summary);

    assertThat(thrown).as("what the endpoint threw at the web layer (a bare 500)").isNull();
    assertAllAnswer503Naming(onRouting, "Cannot determine target DataSource");
  }

  private static void assertAllAnswer503Naming(ConsumerDedupEndpoint endpoint, String reason) {
    WebEndpointResponse<Object> summary = endpoint.summary();
    WebEndpointResponse<Object> list = endpoint.read("records", null, null, null, null, null, null);
    WebEndpointResponse<Object> one =
        endpoint.read("record", null, "payment", "ORD-1", null, null, null);
    WebEndpointResponse<Object> release =
        endpoint.change("release", "payment", "ORD-1", "ops", null, SecurityContext.NONE);

    for (WebEndpointResponse<Object> response : List.of(summary, list, one, release)) {
      assertThat(response.getStatus()).as("status of %s", error(response)).isEqualTo(503);
      assertThat(error(response)).contains("The dedup table did not answer").contains(reason);
    }
  }

  private WebEndpointResponse<Object> records(String bizType, String after) {
    return endpoint.read("records", null, bizType, null, null, null, after);
  }

  private static String cursor(String text) {
    return Base64.getUrlEncoder()
        .withoutPadding()
        .encodeToString(text.getBytes(StandardCharsets.UTF_8));
  }

  private static String error(WebEndpointResponse<Object> response) {
    return String.valueOf(((Map<?, ?>) response.getBody()).get("error"));
  }
}
