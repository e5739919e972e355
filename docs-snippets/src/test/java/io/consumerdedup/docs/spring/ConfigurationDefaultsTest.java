package io.consumerdedup.docs.spring;

import static org.assertj.core.api.Assertions.assertThat;

import com.jayway.jsonpath.JsonPath;
import io.consumerdedup.docs.DocsDatabase;
import io.consumerdedup.spring.autoconfigure.ConsumerDedupAutoConfiguration;
import io.consumerdedup.spring.autoconfigure.ConsumerDedupProperties;
import java.io.IOException;
import java.io.InputStream;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/**
 * docs/configuration.md lists every {@code consumer-dedup.*} property with its default in one
 * properties block, which a reader copies into application.properties to start from: copied as it
 * is, the application starts, and with the defaults it would have without it.
 */
class ConfigurationDefaultsTest {

  @Test
  void theDocumentedDefaultsCopiedAsTheyAreStartTheApplicationWithTheDefaults() throws Exception {
    List<String> properties = documentedProperties();
    assertThat(properties).as("the documented properties").hasSizeGreaterThan(25);

    try (DocsDatabase database = DocsDatabase.create("docs_defaults")) {
      new ApplicationContextRunner()
          .withConfiguration(AutoConfigurations.of(ConsumerDedupAutoConfiguration.class))
          .withBean(DataSource.class, () -> database)
          .withPropertyValues(properties.toArray(String[]::new))
          .run(
              context -> {
                assertThat(context).hasNotFailed();
                assertThat(context.getBean(ConsumerDedupProperties.class))
                    .usingRecursiveComparison()
                    .isEqualTo(new ConsumerDedupProperties());
              });
    }
  }

  @Test
  void everyPropertyOfTheMetadataIsOnThePage() throws IOException {
    // Spring Boot's jars have such a file too: read them all and keep consumer-dedup's names.
    List<String> names = new ArrayList<>();
    for (URL file :
        Collections.list(
            ConsumerDedupProperties.class
                .getClassLoader()
                .getResources("META-INF/spring-configuration-metadata.json"))) {
      try (InputStream in = file.openStream()) {
        names.addAll(
            JsonPath.read(
                new String(in.readAllBytes(), StandardCharsets.UTF_8), "$.properties[*].name"));
      }
    }
    String page = String.join("\n", pageLines());
    assertThat(names.stream().filter(name -> name.startsWith("consumer-dedup.")))
        .as("consumer-dedup.* properties")
        .hasSizeGreaterThan(25)
        .allSatisfy(name -> assertThat(page).as("docs/configuration.md").contains(name + "="));
  }

  private static List<String> pageLines() throws IOException {
    Path page = Path.of("").toAbsolutePath().getParent().resolve("docs/configuration.md");
    return Files.readAllLines(page, StandardCharsets.UTF_8);
  }

  /** The {@code key=value} lines of the page's properties block that starts with enabled=true. */
  private static List<String> documentedProperties() throws IOException {
    List<String> lines = pageLines();
    int start = lines.indexOf("consumer-dedup.enabled=true");
    if (start < 1 || !lines.get(start - 1).equals("```properties")) {
      throw new IllegalStateException(
          "docs/configuration.md has no properties block starting with consumer-dedup.enabled=true");
    }
    int end = lines.subList(start, lines.size()).indexOf("```") + start;
    return lines.subList(start, end).stream()
        .filter(line -> !line.isBlank() && !line.startsWith("#"))
        .toList();
  }
}
