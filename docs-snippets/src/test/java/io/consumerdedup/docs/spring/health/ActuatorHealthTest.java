package io.consumerdedup.docs.spring.health;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.docs.DocsDatabase;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.Nested;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.context.SpringBootTest.WebEnvironment;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.test.annotation.DirtiesContext;
import org.springframework.test.context.TestPropertySource;

/**
 * docs/operations.md's Actuator settings, loaded from the file the page shows, in an application
 * without Spring Security: the consumerdedup health answers 200 UP with its details, and the
 * endpoint reads and takes writes.
 */
class ActuatorHealthTest {
  private static final HttpClient http = HttpClient.newHttpClient();

  static HttpResponse<String> get(int port, String path) throws Exception {
    return http.send(
        HttpRequest.newBuilder(URI.create("http://localhost:" + port + path)).GET().build(),
        HttpResponse.BodyHandlers.ofString());
  }

  @Nested
  @SpringBootTest(classes = App.class, webEnvironment = WebEnvironment.RANDOM_PORT)
  @TestPropertySource(locations = "classpath:actuator.properties")
  @DirtiesContext
  class WithTheDocumentedSettings {
    @LocalServerPort int port;

    @Test
    void theConsumerDedupHealthIsUpWithItsDetails() throws Exception {
      HttpResponse<String> health = get(port, "/actuator/health/consumerdedup");

      assertThat(health.statusCode()).isEqualTo(200);
      assertThat(health.body())
          .contains("\"status\":\"UP\"")
          .contains("\"table\":\"consumer_dedup\"");
      assertThat(get(port, "/actuator/health").body()).contains("\"consumerdedup\":");
    }

    /** The same file exposes the endpoint and turns its writes on, as the page says. */
    @Test
    void theEndpointReadsAndItsWritesAreOn() throws Exception {
      HttpResponse<String> summary = get(port, "/actuator/consumerdedup");
      assertThat(summary.statusCode()).isEqualTo(200);
      assertThat(summary.body()).contains("\"writeEnabled\":true");

      HttpResponse<String> release =
          http.send(
              HttpRequest.newBuilder(
                      URI.create("http://localhost:" + port + "/actuator/consumerdedup/release"))
                  .header("Content-Type", "application/json")
                  .POST(
                      HttpRequest.BodyPublishers.ofString(
                          "{\"bizType\":\"payment\",\"bizKey\":\"ORD-none\","
                              + "\"requestedBy\":\"alice\"}"))
                  .build(),
              HttpResponse.BodyHandlers.ofString());
      assertThat(release.statusCode())
          .as("a release of an unknown key, not refused")
          .isEqualTo(404);
    }
  }

  /** What the page explains: without Spring Security, when-authorized hides every component. */
  @Nested
  @SpringBootTest(
      classes = App.class,
      webEnvironment = WebEnvironment.RANDOM_PORT,
      properties = {
        "management.endpoints.web.exposure.include=health,consumerdedup",
        "management.endpoint.health.show-details=when-authorized"
      })
  @DirtiesContext
  class WhenAuthorizedWithoutSpringSecurity {
    @LocalServerPort int port;

    @Test
    void theComponentIsNotFoundAndTheHealthListsNone() throws Exception {
      assertThat(get(port, "/actuator/health/consumerdedup").statusCode()).isEqualTo(404);
      assertThat(get(port, "/actuator/health").body()).doesNotContain("consumerdedup");
    }
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {
    @Bean
    DocsDatabase dataSource() {
      return DocsDatabase.create("docs_actuator");
    }
  }
}
