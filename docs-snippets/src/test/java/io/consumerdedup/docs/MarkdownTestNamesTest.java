package io.consumerdedup.docs;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.jspecify.annotations.Nullable;
import org.junit.jupiter.api.Test;

/**
 * Every test a page names as its evidence ({@code `SomeTest.someMethod`}, or {@code `SomeTest`}
 * alone) exists: the reliability table quotes each fault's test, and a test renamed or removed
 * would leave the page pointing at nothing.
 */
class MarkdownTestNamesTest {
  private static final Pattern NAMED_TEST =
      Pattern.compile("`([A-Z][A-Za-z0-9]*Tests?)(?:\\.([a-z][A-Za-z0-9_]*))?(?=[`(])");
  private static final Pattern EXTENDS = Pattern.compile("\\bextends\\s+([A-Z][A-Za-z0-9]*)");

  @Test
  void everyTestAPageNamesExists() {
    Map<String, Path> sources = javaSources(MarkdownFile.repositoryRoot());
    List<String> problems = new ArrayList<>();
    int checked = 0;
    for (MarkdownFile file : MarkdownFile.all()) {
      for (int i = 0; i < file.lines.size(); i++) {
        Matcher named = NAMED_TEST.matcher(file.lines.get(i));
        while (named.find()) {
          checked++;
          String problem = check(sources, named.group(1), named.group(2));
          if (problem != null) {
            problems.add(file.name() + ":" + (i + 1) + ": " + problem);
          }
        }
      }
    }
    assertThat(problems).as("tests the pages name that do not exist").isEmpty();
    assertThat(checked).as("test names checked").isGreaterThan(150);
  }

  private static @Nullable String check(
      Map<String, Path> sources, String testClass, @Nullable String method) {
    Path source = sources.get(testClass);
    if (source == null) {
      return "no class " + testClass;
    }
    if (method == null) {
      return null;
    }
    // The method may be inherited, as the cases a base class runs against each database are.
    for (Path at = source; at != null; at = superclass(sources, at)) {
      if (read(at).contains(" " + method + "(")) {
        return null;
      }
    }
    return testClass + " has no method " + method;
  }

  private static @Nullable Path superclass(Map<String, Path> sources, Path source) {
    Matcher extended = EXTENDS.matcher(read(source));
    return extended.find() ? sources.get(extended.group(1)) : null;
  }

  private static Map<String, Path> javaSources(Path root) {
    Map<String, Path> sources = new HashMap<>();
    try (Stream<Path> files = Files.walk(root)) {
      files
          .filter(file -> file.toString().endsWith(".java"))
          .filter(file -> !root.relativize(file).toString().contains("target"))
          .forEach(
              file ->
                  sources.putIfAbsent(file.getFileName().toString().replace(".java", ""), file));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return sources;
  }

  private static String read(Path file) {
    try {
      return Files.readString(file);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
