package io.consumerdedup.spring.autoconfigure;

import static org.assertj.core.api.Assertions.assertThat;

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

/**
 * The Actuator endpoint when a request holds a value the database cannot take (a NUL in a filter or
 * a cursor, a time beyond its range) or cannot be reached: the operator gets a status and the
 * reason, not an exception the web layer turns into a bare 500.
 */
class EndpointRefusedRequestsTest {
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
