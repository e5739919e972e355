package io.consumerdedup.docs;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.CodeSource;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * The dependency versions the documentation tells a reader to copy are the ones this build compiles
 * and tests the snippets with: a reader who pastes the README's {@code <dependency>} blocks gets
 * the driver, pool and logging binding that {@code BillingTest} ran, and this project's own
 * version.
 */
class MarkdownDependencyVersionsTest {
  private static final Pattern DEPENDENCY =
      Pattern.compile(
          "<groupId>([^<]+)</groupId>\\s*<artifactId>([^<]+)</artifactId>\\s*<version>([^<]+)</version>");

  /** A class of each third-party artifact the docs pin, found on this module's test class path. */
  private static final Map<String, String> CLASS_OF_ARTIFACT =
      Map.of(
          "org.postgresql:postgresql", "org.postgresql.Driver",
          "com.zaxxer:HikariCP", "com.zaxxer.hikari.HikariDataSource",
          "ch.qos.logback:logback-classic", "ch.qos.logback.classic.Logger");

  @Test
  void everyPinnedVersionIsTheOneTheBuildTests() throws Exception {
    String projectVersion = projectVersion();
    List<String> problems = new ArrayList<>();
    int checked = 0;
    for (MarkdownFile file : MarkdownFile.all()) {
      for (MarkdownFile.Block block : file.blocks) {
        if (!block.language().equals("xml")) {
          continue;
        }
        Matcher dependency = DEPENDENCY.matcher(block.text());
        while (dependency.find()) {
          String artifact = dependency.group(1) + ":" + dependency.group(2);
          String version = dependency.group(3);
          String where = file.name() + ":" + (block.openLine() + 1) + ": " + artifact;
          String expected;
          if (version.startsWith("${")) {
            // A reader pastes the block into a build that has no such property: Maven then refuses
            // the POM. A property is fine only where the page itself says to define it.
            String property = version.substring(2, version.length() - 1);
            if (!file.definesProperty(property)) {
              problems.add(
                  where
                      + " takes its version from ${"
                      + property
                      + "}, which the page never defines (<"
                      + property
                      + ">): write the version");
            }
            continue;
          } else if (dependency.group(1).equals("io.consumerdedup")) {
            expected = projectVersion;
          } else if (CLASS_OF_ARTIFACT.containsKey(artifact)) {
            expected = jarVersion(artifact, CLASS_OF_ARTIFACT.get(artifact));
          } else {
            problems.add(
                where
                    + " pins "
                    + version
                    + ", which this test cannot check: add a class of it to CLASS_OF_ARTIFACT");
            continue;
          }
          checked++;
          if (!version.equals(expected)) {
            problems.add(where + " says " + version + ", the build uses " + expected);
          }
        }
      }
    }
    assertThat(problems).as("dependency versions that are not the tested ones").isEmpty();
    assertThat(checked).as("pinned versions checked").isGreaterThanOrEqualTo(5);
  }

  /** The version in the name of the jar that holds {@code className}, as Maven names jars. */
  private static String jarVersion(String artifact, String className) throws Exception {
    CodeSource source = Class.forName(className).getProtectionDomain().getCodeSource();
    String jar = Path.of(source.getLocation().toURI()).getFileName().toString();
    String prefix = artifact.substring(artifact.indexOf(':') + 1) + "-";
    if (!jar.startsWith(prefix) || !jar.endsWith(".jar")) {
      throw new IllegalStateException(className + " is not in a jar of " + artifact + ": " + jar);
    }
    return jar.substring(prefix.length(), jar.length() - ".jar".length());
  }

  /** The parent POM's own version, which every module of this project carries. */
  private static String projectVersion() throws IOException {
    String pom =
        Files.readString(MarkdownFile.repositoryRoot().resolve("pom.xml"), StandardCharsets.UTF_8);
    Matcher version =
        Pattern.compile(
                "<artifactId>consumer-dedup-parent</artifactId>\\s*<version>([^<]+)</version>")
            .matcher(pom);
    if (!version.find()) {
      throw new IllegalStateException("No version of consumer-dedup-parent in pom.xml");
    }
    return version.group(1);
  }
}
