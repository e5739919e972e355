package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import com.zaxxer.hikari.HikariDataSource;
import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.jdbc.JdbcDedupAdmin;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.ConnectionSource;
import io.consumerdedup.testing.FaultyDataSource;
import io.consumerdedup.testing.TestDatabase;
import java.nio.charset.StandardCharsets;
import java.security.Principal;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.boot.actuate.endpoint.SecurityContext;
import org.springframework.boot.actuate.endpoint.web.WebEndpointResponse;
import org.springframework.jdbc.datasource.LazyConnectionDataSourceProxy;
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
  private JdbcDedupStore store;
  private ConsumerDedupEndpoint endpoint;

  @BeforeEach
  void setUp() {
    schema = TestDatabase.newSchema("endpointrefused");
    dataSource = FaultyDataSource.on(schema, 2, Duration.ofSeconds(2));
    store = JdbcDedupStore.builder(dataSource).retryMaxAttempts(1).build();
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

  /**
   * A DataSource that throws an {@code Error} (a driver class that could not be initialised): the
   * {@code Error} escaped the endpoint, and the web layer answered a bare 500 without the reason,
   * where the health answers DOWN with it.
   */
  @Test
  void aDataSourceThatThrowsAnErrorAnswers503NamingItNotABare500() {
    ConnectionSource broken =
        new ConnectionSource() {
          @Override
          public Connection getConnection() {
            throw new NoClassDefFoundError("Could not initialize class org.postgresql.Driver");
          }
        };
    JdbcDedupStore store = JdbcDedupStore.builder(broken).retryMaxAttempts(1).build();
    ConsumerDedupEndpoint onBroken =
        new ConsumerDedupEndpoint(JdbcDedupAdmin.of(store), store, true);

    Throwable thrown = catchThrowable(onBroken::summary);

    assertThat(thrown).as("what the endpoint threw at the web layer (a bare 500)").isNull();
    assertAllAnswer503Naming(onBroken, "Could not initialize class");
  }

  /**
   * Spring's {@code LazyConnectionDataSourceProxy} over a routing DataSource (read/write routing):
   * the connection is only looked up at the first statement, so what the routing throws (a {@code
   * RuntimeException}) comes from the connection, not from {@code getConnection()}. It escaped the
   * endpoint as a bare 500.
   */
  @Test
  void aConnectionThatThrowsARuntimeExceptionAnswers503NamingItNotABare500() {
    AbstractRoutingDataSource routing =
        new AbstractRoutingDataSource() {
          @Override
          protected Object determineCurrentLookupKey() {
            return TENANT.get();
          }
        };
    routing.setTargetDataSources(Map.of("acme", dataSource));
    routing.afterPropertiesSet();
    LazyConnectionDataSourceProxy lazy = new LazyConnectionDataSourceProxy();
    lazy.setTargetDataSource(routing);
    lazy.setDefaultAutoCommit(true);
    lazy.setDefaultTransactionIsolation(Connection.TRANSACTION_READ_COMMITTED);
    lazy.afterPropertiesSet();
    JdbcDedupStore store = JdbcDedupStore.builder(lazy).retryMaxAttempts(1).build();
    ConsumerDedupEndpoint onLazy = new ConsumerDedupEndpoint(JdbcDedupAdmin.of(store), store, true);

    Throwable thrown = catchThrowable(onLazy::summary);

    assertThat(thrown).as("what the endpoint threw at the web layer (a bare 500)").isNull();
    assertAllAnswer503Naming(onLazy, "Cannot determine target DataSource");
  }

  /**
   * The authenticated principal's name goes into what is recorded as who asked: a name the record
   * cannot take as it is (a line break, longer than the column's room) answered 400 blaming the
   * {@code requestedBy} the caller never sent, and no such operator could release or forget. Its
   * safe form is recorded instead.
   */
  @Test
  void aPrincipalNameTheRecordCannotTakeAsItIsIsRecordedInASafeForm() {
    DedupKey key = DedupKey.of("payment", "ORD-9");
    Duration retention = Duration.ofDays(1);
    store.complete(
        (ClaimResult.Claimed)
            store.claim(
                new ClaimRequest(key, "pod-1", Duration.ofMinutes(1), retention, null, null)),
        retention);
    String longName = "CN=" + "operations-".repeat(30) + "team,O=Example";

    WebEndpointResponse<Object> multiLine =
        endpoint.change("release", "payment", "ORD-9", null, null, principal("ops\nINFO forged"));
    WebEndpointResponse<Object> tooLong =
        endpoint.change("forget", "payment", "ORD-9", "OPS-12", null, principal(longName));

    assertThat(multiLine.getStatus()).as("release by %s", multiLine.getBody()).isEqualTo(200);
    assertThat(requestedBy(multiLine)).isEqualTo("ops\\u000AINFO forged");
    assertThat(tooLong.getStatus()).as("forget by %s", tooLong.getBody()).isEqualTo(200);
    assertThat(((Map<?, ?>) tooLong.getBody()).get("applied")).isEqualTo(true);
    assertThat(requestedBy(tooLong))
        .startsWith(longName.substring(0, 100))
        .endsWith("\u2026 (OPS-12)")
        .hasSizeLessThanOrEqualTo(256);
    assertThat(store.find(key)).as("the record, forgotten").isEmpty();
  }

  private static SecurityContext principal(String name) {
    return new SecurityContext() {
      @Override
      public Principal getPrincipal() {
        return () -> name;
      }

      @Override
      public boolean isUserInRole(String role) {
        return true;
      }
    };
  }

  private static String requestedBy(WebEndpointResponse<Object> response) {
    return String.valueOf(((Map<?, ?>) response.getBody()).get("requestedBy"));
  }

  /**
   * A record whose status a newer version of consumer-dedup wrote (its migration widened the status
   * check; the column holds text): the request is not wrong, and the record is shown as stored,
   * beside the others of its list.
   */
  @Test
  @SuppressWarnings("unchecked")
  void aRecordOfAStatusANewerVersionWroteIsShownAsStoredNotABadRequest() throws SQLException {
    Duration retention = Duration.ofDays(1);
    for (String key : List.of("ORD-1", "ORD-2", "ORD-3")) {
      ClaimRequest request =
          new ClaimRequest(
              DedupKey.of("payment", key), "pod-1", Duration.ofMinutes(1), retention, null, null);
      store.complete((ClaimResult.Claimed) store.claim(request), retention);
    }
    try (Connection connection = TestDatabase.connect(schema);
        Statement statement = connection.createStatement()) {
      statement.execute("ALTER TABLE consumer_dedup DROP CONSTRAINT consumer_dedup_status_ck");
      statement.execute("UPDATE consumer_dedup SET status = 'ABANDONED' WHERE biz_key = 'ORD-2'");
    }

    WebEndpointResponse<Object> list = records("payment", null);

    assertThat(list.getStatus()).as("the list, answering %s", list.getBody()).isEqualTo(200);
    assertThat((List<?>) ((Map<?, ?>) list.getBody()).get("records"))
        .extracting(r -> ((ConsumerDedupEndpoint.RecordView) r).status())
        .containsExactly("SUCCESS", "ABANDONED", "SUCCESS");
    Throwable summaryThrown = catchThrowable(endpoint::summary);
    assertThat(summaryThrown).as("what the summary threw at the web layer (a bare 500)").isNull();
    assertThat((List<Object>) ((Map<?, ?>) endpoint.summary().getBody()).get("counts"))
        .contains(new ConsumerDedupEndpoint.CountView("payment", "ABANDONED", 1, 0));
    WebEndpointResponse<Object> one =
        endpoint.read("record", null, "payment", "ORD-2", null, null, null);
    assertThat(one.getStatus()).isEqualTo(200);
    assertThat(((ConsumerDedupEndpoint.RecordView) one.getBody()).status()).isEqualTo("ABANDONED");
    WebEndpointResponse<Object> unknown =
        endpoint.read("records", "unknown", null, null, null, null, null);
    assertThat((List<?>) ((Map<?, ?>) unknown.getBody()).get("records")).hasSize(1);
    WebEndpointResponse<Object> forget =
        endpoint.change("forget", "payment", "ORD-2", "ops", null, SecurityContext.NONE);
    assertThat(forget.getStatus()).isEqualTo(409);
    assertThat(String.valueOf(((Map<?, ?>) forget.getBody()).get("message")))
        .contains("'ABANDONED'");
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
