package io.consumerdedup.docs;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * Every Java snippet of the documentation is code that compiles in this build: each {@code ```java}
 * block of a Markdown file follows a marker {@code <!-- snippet: path#region -->} and reads exactly
 * as that region of a source file (see {@link SourceRegion}); a marker before a block of another
 * language (a properties file a test loads) is checked the same way.
 *
 * <p>After changing a region, {@code ./mvnw -B -q -o -pl docs-snippets -am verify
 * -Dtest=MarkdownSnippetsTest -Dsurefire.failIfNoSpecifiedTests=false -Ddocs.snippets.write=true}
 * copies the regions into the Markdown files.
 */
class MarkdownSnippetsTest {
  private static final Pattern MARKER = Pattern.compile("<!-- snippet: (\\S+) -->");

  /**
   * What the README's plain quick start lists: consumer-dedup-core and its dependencies, the
   * PostgreSQL driver and pool, and SLF4J.
   */
  private static final List<String> PLAIN_KAFKA_IMPORTS =
      List.of(
          "java.",
          "javax.sql.",
          "io.consumerdedup.core.",
          "io.consumerdedup.jdbc.",
          "io.consumerdedup.kafka.",
          "org.apache.kafka.",
          "com.zaxxer.hikari.",
          "org.slf4j.");

  @Test
  void everyJavaSnippetIsARegionOfCompiledCode() throws IOException {
    Path root = MarkdownFile.repositoryRoot();
    boolean write = Boolean.getBoolean("docs.snippets.write");
    List<String> problems = new ArrayList<>();
    int checked = 0;
    for (MarkdownFile file : MarkdownFile.all()) {
      List<String> lines = new ArrayList<>(file.lines);
      boolean changed = false;
      // From the last block up, so that rewriting a block keeps the line numbers of those above.
      for (int b = file.blocks.size() - 1; b >= 0; b--) {
        MarkdownFile.Block block = file.blocks.get(b);
        String where = file.name() + ":" + (block.openLine() + 1);
        Matcher marker = MARKER.matcher(block.lineBefore() == null ? "" : block.lineBefore());
        if (!marker.matches()) {
          if (block.language().equals("java")) {
            problems.add(
                where
                    + ": a ```java block without a '<!-- snippet: path#region -->' line before"
                    + " it: put the code in docs-snippets (or a test of the module it is about),"
                    + " mark it with // tag::region[] and // end::region[], and name it there");
          }
          continue;
        }
        checked++;
        String expected;
        try {
          expected = SourceRegion.read(root, marker.group(1));
        } catch (IllegalArgumentException e) {
          problems.add(where + ": " + e.getMessage());
          continue;
        }
        if (expected.equals(block.text())) {
          continue;
        }
        if (write) {
          List<String> replacement =
              expected
                  .lines()
                  .map(line -> line.isEmpty() ? "" : block.indentation() + line)
                  .toList();
          lines.subList(block.openLine() + 1, block.closeLine()).clear();
          lines.addAll(block.openLine() + 1, replacement);
          changed = true;
        } else {
          problems.add(
              where
                  + ": the block differs from "
                  + marker.group(1)
                  + " (-Ddocs.snippets.write=true copies it); the region reads:\n"
                  + expected);
        }
      }
      if (changed) {
        Files.write(file.path, lines, StandardCharsets.UTF_8);
      }
    }
    for (MarkdownFile file : MarkdownFile.all()) {
      for (int i = 0; i < file.lines.size(); i++) {
        boolean markerBeforeABlock = i + 1 < file.lines.size() && file.inBlock[i + 1];
        if (MARKER.matcher(file.lines.get(i).strip()).matches() && !markerBeforeABlock) {
          problems.add(file.name() + ":" + (i + 1) + ": a snippet marker not followed by a block");
        }
      }
    }
    assertThat(problems).as("snippets that are not compiled code as written").isEmpty();
    assertThat(checked).as("snippets checked").isGreaterThan(10);
  }

  @Test
  void thePlainKafkaSnippetsNeedNothingButWhatTheQuickStartLists() throws IOException {
    Path plain = Path.of("src/main/java/io/consumerdedup/docs/kafka").toAbsolutePath();
    List<String> problems = new ArrayList<>();
    try (Stream<Path> files = Files.list(plain)) {
      for (Path file : files.sorted().toList()) {
        for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
          if (line.startsWith("import ")) {
            String imported = line.replaceFirst("^import (static )?", "");
            if (PLAIN_KAFKA_IMPORTS.stream().noneMatch(imported::startsWith)) {
              problems.add(file.getFileName() + ": " + line);
            }
          }
        }
      }
    }
    assertThat(problems)
        .as("imports of the plain kafka-clients snippets beyond the quick start's dependencies")
        .isEmpty();
  }
}
