package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupResult;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.Outcome;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.testing.TestDatabase;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Nested;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.context.SpringBootTest.WebEnvironment;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * The {@code consumerdedup} Actuator endpoint and health indicator in a running Boot application,
 * over real HTTP on PostgreSQL: an operator finds a stuck key, releases it, and the next delivery
 * applies it; a key is forgotten and applied again, a live one only when forced; with writes
 * disabled nothing changes.
 */
class ConsumerDedupEndpointHttpTest {
  private static final HttpClient http = HttpClient.newHttpClient();

  static String prepare(DynamicPropertyRegistry registry, String prefix) {
    String schema = SpringTestEnvironment.prepare(registry, prefix);
    registry.add("management.endpoints.web.exposure.include", () -> "health,consumerdedup");
    registry.add("management.endpoint.health.show-details", () -> "always");
    return schema;
  }

  static HttpResponse<String> get(int port, String path) throws Exception {
    return http.send(
        HttpRequest.newBuilder(URI.create("http://localhost:" + port + path)).GET().build(),
        HttpResponse.BodyHandlers.ofString());
  }

  static HttpResponse<String> post(int port, String path, String json) throws Exception {
    return http.send(
        HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofString(json))
            .build(),
        HttpResponse.BodyHandlers.ofString());
  }

  static String encode(String value) {
    return URLEncoder.encode(value, StandardCharsets.UTF_8);
  }

  @Nested
  @SpringBootTest(
      classes = App.class,
      webEnvironment = WebEnvironment.RANDOM_PORT,
      properties = {
        "consumer-dedup.admin.write-enabled=true",
        "spring.main.web-application-type=servlet"
      })
  @DirtiesContext
  class WithWritesEnabled {
    static String schema;

    @DynamicPropertySource
    static void environment(DynamicPropertyRegistry registry) {
      schema = prepare(registry, "endpoint_rw");
    }

    @LocalServerPort int port;
    @Autowired JdbcDedupStore store;

    @Test
    void anOperatorFindsAStuckKeyReleasesItAndTheNextDeliveryAppliesIt() throws Exception {
      DedupKey stuck = DedupKey.of("payment", "ORD-stuck/1");
      store.claim(
          new ClaimRequest(
              stuck, "pod-7", Duration.ofMinutes(5), Duration.ofDays(1), null, "payments-0@42"));
      DedupKey failed = DedupKey.of("payment", "ORD-failed-1");
      ClaimResult.Claimed failedClaim =
          (ClaimResult.Claimed)
              store.claim(
                  new ClaimRequest(
                      failed, "pod-7", Duration.ofMinutes(5), Duration.ofDays(1), null, null));
      store.fail(failedClaim, "java.io.IOException: bank down", Duration.ofDays(1));

      HttpResponse<String> health = get(port, "/actuator/health/consumerdedup");
      assertThat(health.statusCode()).isEqualTo(200);
      assertThat(health.body())
          .contains("\"status\":\"UP\"")
          .contains("\"table\":\"consumer_dedup\"");

      HttpResponse<String> summary = get(port, "/actuator/consumerdedup");
      assertThat(summary.statusCode()).isEqualTo(200);
      assertThat(summary.body())
          .contains("\"writeEnabled\":true")
          .contains(
              "{\"bizType\":\"payment\",\"status\":\"FAILED\",\"count\":1,\"expiredLeases\":0}")
          .contains(
              "{\"bizType\":\"payment\",\"status\":\"PROCESSING\",\"count\":1,\"expiredLeases\":0}");

      HttpResponse<String> live =
          get(port, "/actuator/consumerdedup/records?status=PROCESSING&lease=live&limit=10");
      assertThat(live.body())
          .contains("\"bizKey\":\"ORD-stuck/1\"")
          .contains("\"owner\":\"pod-7\"");
      HttpResponse<String> failures =
          get(port, "/actuator/consumerdedup/records?status=FAILED&bizType=payment");
      assertThat(failures.body())
          .contains("\"lastError\":\"java.io.IOException: bank down\"")
          .contains("\"next\":null");

      HttpResponse<String> one =
          get(
              port,
              "/actuator/consumerdedup/record?bizType=payment&bizKey=" + encode("ORD-stuck/1"));
      assertThat(one.statusCode()).isEqualTo(200);
      assertThat(one.body()).contains("\"status\":\"PROCESSING\"").contains("\"leaseLive\":true");
      assertThat(
              get(port, "/actuator/consumerdedup/record?bizType=payment&bizKey=none").statusCode())
          .isEqualTo(404);

      HttpResponse<String> refused =
          post(
              port,
              "/actuator/consumerdedup/release",
              "{\"bizType\":\"payment\",\"bizKey\":\"ORD-stuck/1\",\"requestedBy\":\"alice\"}");
      assertThat(refused.statusCode()).as("release of a live lease").isEqualTo(409);
      assertThat(refused.body())
          .contains("\"applied\":false")
          .contains("live lease")
          .contains("applied twice")
          .contains("force=true");
      assertThat(store.find(stuck).orElseThrow().status()).isEqualTo(DedupStatus.PROCESSING);

      HttpResponse<String> forged =
          post(
              port,
              "/actuator/consumerdedup/release",
              "{\"bizType\":\"payment\",\"bizKey\":\"ORD-stuck/1\","
                  + "\"requestedBy\":\"alice\\nINFO Released by admin\",\"force\":true}");
      assertThat(forged.statusCode()).as("a line break in requestedBy").isEqualTo(400);
      assertThat(forged.body()).contains("requestedBy must not contain control characters");
      assertThat(store.find(stuck).orElseThrow().status()).isEqualTo(DedupStatus.PROCESSING);

      HttpResponse<String> release =
          post(
              port,
              "/actuator/consumerdedup/release",
              "{\"bizType\":\"payment\",\"bizKey\":\"ORD-stuck/1\",\"requestedBy\":\"alice\","
                  + "\"force\":true}");
      assertThat(release.statusCode()).isEqualTo(200);
      assertThat(release.body())
          .contains("\"applied\":true")
          .contains("forced while its lease was live")
          .contains("\"requestedBy\":\"alice (unauthenticated)\"")
          .contains("\"status\":\"PROCESSING\"");
      assertThat(store.find(stuck).orElseThrow().status()).isEqualTo(DedupStatus.FAILED);

      DedupKey expired = DedupKey.of("payment", "ORD-expired-1");
      store.claim(
          new ClaimRequest(
              expired, "pod-gone", Duration.ofMillis(1), Duration.ofDays(1), null, null));
      Thread.sleep(50);
      HttpResponse<String> expiredRelease =
          post(
              port,
              "/actuator/consumerdedup/release",
              "{\"bizType\":\"payment\",\"bizKey\":\"ORD-expired-1\",\"requestedBy\":\"alice\"}");
      assertThat(expiredRelease.statusCode()).as("release of an expired lease").isEqualTo(200);
      assertThat(expiredRelease.body()).contains("\"applied\":true");
      assertThat(store.find(expired).orElseThrow().status()).isEqualTo(DedupStatus.FAILED);

      AtomicInteger charges = new AtomicInteger();
      try (IdempotentExecutor redelivery = IdempotentExecutor.builder(store).build()) {
        DedupResult<Integer> applied = redelivery.execute(stuck, charges::incrementAndGet);
        assertThat(applied.outcome()).isEqualTo(Outcome.PROCESSED);
        assertThat(applied.attempt()).isEqualTo(2);
      }
      assertThat(charges).hasValue(1);
      assertThat(
              get(
                      port,
                      "/actuator/consumerdedup/record?bizType=payment&bizKey="
                          + encode("ORD-stuck/1"))
                  .body())
          .as("the release's note is gone once the key succeeded")
          .contains("\"status\":\"SUCCESS\"")
          .contains("\"lastError\":null");

      HttpResponse<String> forget =
          post(
              port,
              "/actuator/consumerdedup/forget",
              "{\"bizType\":\"payment\",\"bizKey\":\"ORD-stuck/1\",\"requestedBy\":\"bob\"}");
      assertThat(forget.statusCode()).isEqualTo(200);
      assertThat(forget.body()).contains("\"applied\":true").contains("\"status\":\"SUCCESS\"");
      assertThat(store.find(stuck)).isEmpty();

      DedupKey held = DedupKey.of("payment", "ORD-held-2");
      store.claim(
          new ClaimRequest(
              held, "pod-8", Duration.ofMinutes(5), Duration.ofDays(1), null, "payments-1@7"));
      HttpResponse<String> forgetRefused =
          post(
              port,
              "/actuator/consumerdedup/forget",
              "{\"bizType\":\"payment\",\"bizKey\":\"ORD-held-2\",\"requestedBy\":\"bob\"}");
      assertThat(forgetRefused.statusCode()).as("forget of a live lease").isEqualTo(409);
      assertThat(forgetRefused.body())
          .contains("\"applied\":false")
          .contains("Not forgotten")
          .contains("applied twice")
          .contains("forget with force=true");
      assertThat(store.find(held).orElseThrow().status()).isEqualTo(DedupStatus.PROCESSING);
      HttpResponse<String> forcedForget =
          post(
              port,
              "/actuator/consumerdedup/forget",
              "{\"bizType\":\"payment\",\"bizKey\":\"ORD-held-2\",\"requestedBy\":\"bob\","
                  + "\"force\":true}");
      assertThat(forcedForget.statusCode()).isEqualTo(200);
      assertThat(forcedForget.body())
          .contains("\"applied\":true")
          .contains("forced while its lease was live");
      assertThat(store.find(held)).isEmpty();

      assertThat(
              post(
                      port,
                      "/actuator/consumerdedup/forget",
                      "{\"bizType\":\"payment\",\"bizKey\":\"ORD-none\"}")
                  .statusCode())
          .isEqualTo(404);
    }
  }

  @Nested
  @SpringBootTest(
      classes = App.class,
      webEnvironment = WebEnvironment.RANDOM_PORT,
      properties = "spring.main.web-application-type=servlet")
  @DirtiesContext
  class WithWritesDisabledByDefault {
    static String schema;

    @DynamicPropertySource
    static void environment(DynamicPropertyRegistry registry) {
      schema = prepare(registry, "endpoint_ro");
    }

    @LocalServerPort int port;
    @Autowired JdbcDedupStore store;

    @Test
    void writesAreRefusedAndChangeNothing() throws Exception {
      DedupKey key = DedupKey.of("payment", "ORD-held-1");
      store.claim(
          new ClaimRequest(key, "pod-1", Duration.ofMinutes(5), Duration.ofDays(1), null, null));

      HttpResponse<String> release =
          post(
              port,
              "/actuator/consumerdedup/release",
              "{\"bizType\":\"payment\",\"bizKey\":\"ORD-held-1\"}");

      assertThat(release.statusCode()).isEqualTo(403);
      assertThat(release.body()).contains("consumer-dedup.admin.write-enabled=true");
      assertThat(store.find(key).orElseThrow().status()).isEqualTo(DedupStatus.PROCESSING);
      assertThat(get(port, "/actuator/consumerdedup").body()).contains("\"writeEnabled\":false");
    }

    @Test
    void aFilterValueThatIsNoStatusOrLeaseIsRefusedNamingTheAllowedValues() throws Exception {
      HttpResponse<String> done = get(port, "/actuator/consumerdedup/records?status=DONE");
      assertThat(done.statusCode()).isEqualTo(400);
      assertThat(done.body())
          .isEqualTo(
              "{\"error\":\"status 'DONE' is not one of PROCESSING, SUCCESS, FAILED, UNKNOWN"
                  + " (in any case)\"}");

      HttpResponse<String> soon = get(port, "/actuator/consumerdedup/records?lease=soon");
      assertThat(soon.statusCode()).isEqualTo(400);
      assertThat(soon.body()).contains("lease 'soon' is not one of ANY, LIVE, EXPIRED");

      HttpResponse<String> lowerCase =
          get(port, "/actuator/consumerdedup/records?status=failed&lease=any");
      assertThat(lowerCase.statusCode()).isEqualTo(200);
      assertThat(lowerCase.body()).contains("\"records\":[");
    }

    @Test
    void healthIsDownNamingAColumnThatWentMissing() throws Exception {
      try (Connection connection = TestDatabase.connect(schema);
          PreparedStatement drop =
              connection.prepareStatement(
                  "ALTER TABLE consumer_dedup RENAME COLUMN claim_id TO claim_id_old")) {
        drop.execute();
      }
      try {
        HttpResponse<String> health = get(port, "/actuator/health/consumerdedup");

        assertThat(health.statusCode()).isEqualTo(503);
        assertThat(health.body())
            .contains("\"status\":\"DOWN\"")
            .contains("\"missingColumns\":[\"claim_id\"]")
            .contains("db/consumer-dedup/postgresql/V1__consumer_dedup.sql");
      } finally {
        restoreColumn();
      }
    }

    private void restoreColumn() throws SQLException {
      try (Connection connection = TestDatabase.connect(schema);
          PreparedStatement restore =
              connection.prepareStatement(
                  "ALTER TABLE consumer_dedup RENAME COLUMN claim_id_old TO claim_id")) {
        restore.execute();
      }
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {}
}
