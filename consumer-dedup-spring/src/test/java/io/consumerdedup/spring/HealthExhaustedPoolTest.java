package io.consumerdedup.spring;

import static org.assertj.core.api.Assertions.assertThat;

import java.net.http.HttpResponse;
import java.sql.Connection;
import java.time.Duration;
import javax.sql.DataSource;
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
 * The {@code consumerdedup} health check while the application's connection pool is exhausted (its
 * one connection held): it answers DOWN, with the reason, within {@code
 * consumer-dedup.health-timeout}, so that a probe with a short timeout (Kubernetes: 1 s) gets an
 * answer. Before, the check waited for a connection as long as the pool's connectionTimeout (30 s
 * by HikariCP's default; 5 s here). A real PostgreSQL and HikariCP, over real HTTP.
 */
@SpringBootTest(
    classes = HealthExhaustedPoolTest.App.class,
    webEnvironment = WebEnvironment.RANDOM_PORT,
    properties = "spring.main.web-application-type=servlet")
@DirtiesContext
class HealthExhaustedPoolTest {

  @DynamicPropertySource
  static void environment(DynamicPropertyRegistry registry) {
    ConsumerDedupEndpointHttpTest.prepare(registry, "health_pool");
    registry.add("spring.datasource.hikari.maximum-pool-size", () -> "1");
    registry.add("spring.datasource.hikari.connection-timeout", () -> "5000");
  }

  @LocalServerPort int port;
  @Autowired DataSource dataSource;

  @Test
  void anExhaustedPoolAnswersDownPromptlyWithTheReason() throws Exception {
    HttpResponse<String> up =
        ConsumerDedupEndpointHttpTest.get(port, "/actuator/health/consumerdedup");
    assertThat(up.body()).as("health with the pool free").contains("\"UP\"");

    try (Connection held = dataSource.getConnection()) {
      long start = System.nanoTime();
      HttpResponse<String> health =
          ConsumerDedupEndpointHttpTest.get(port, "/actuator/health/consumerdedup");
      Duration took = Duration.ofNanos(System.nanoTime() - start);
      assertThat(took).as("time to answer the health check").isLessThan(Duration.ofMillis(1500));
      assertThat(health.statusCode()).as("health status code").isEqualTo(503);
      assertThat(health.body()).as("health body").contains("\"DOWN\"").contains("reason");
    }
    HttpResponse<String> again =
        ConsumerDedupEndpointHttpTest.get(port, "/actuator/health/consumerdedup");
    assertThat(again.body()).as("health once the pool is free again").contains("\"UP\"");
  }

  @SpringBootConfiguration
  @EnableAutoConfiguration
  static class App {}
}
