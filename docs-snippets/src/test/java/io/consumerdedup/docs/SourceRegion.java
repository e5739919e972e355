package io.consumerdedup.docs;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;

/**
 * The text a snippet marker names: {@code path} (from the repository root) alone is the whole file;
 * {@code path#name} is the lines between {@code tag::name[]} and {@code end::name[]} (in a comment
 * of any kind), every such region of the file in order, dedented together; {@code path#a,b} is
 * region a, a blank line, then region b, each dedented on its own. Lines holding a tag or end of
 * any region are left out.
 */
final class SourceRegion {
  private static final Pattern ANY_TAG = Pattern.compile(".*\\b(tag|end)::[\\w.-]+\\[\\].*");

  private SourceRegion() {}

  static String read(Path root, String reference) {
    int hash = reference.indexOf('#');
    String file = hash < 0 ? reference : reference.substring(0, hash);
    Path path = root.resolve(file).normalize();
    if (!path.startsWith(root) || !Files.isRegularFile(path)) {
      throw new IllegalArgumentException("no file " + file + " in the repository");
    }
    List<String> lines;
    try {
      lines = Files.readAllLines(path, StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    if (hash < 0) {
      return String.join("\n", trimBlankEnds(lines));
    }
    List<String> regions = new ArrayList<>();
    for (String name : reference.substring(hash + 1).split(",")) {
      List<String> region = trimBlankEnds(region(lines, file, name.strip()));
      regions.add(String.join("\n", dedent(withoutRepeatedBlankLines(region))));
    }
    return String.join("\n\n", regions);
  }

  private static List<String> region(List<String> lines, String file, String name) {
    String start = "tag::" + name + "[]";
    String end = "end::" + name + "[]";
    List<String> region = new ArrayList<>();
    boolean inside = false;
    boolean found = false;
    for (String line : lines) {
      if (line.contains(start)) {
        if (inside) {
          throw new IllegalArgumentException(file + ": " + start + " twice without " + end);
        }
        inside = true;
        found = true;
      } else if (line.contains(end)) {
        if (!inside) {
          throw new IllegalArgumentException(file + ": " + end + " without " + start);
        }
        inside = false;
      } else if (inside && !ANY_TAG.matcher(line).matches()) {
        region.add(line);
      }
    }
    if (!found) {
      throw new IllegalArgumentException(file + " has no region " + start);
    }
    if (inside) {
      throw new IllegalArgumentException(file + ": " + start + " is never ended by " + end);
    }
    return region;
  }

  private static List<String> trimBlankEnds(List<String> lines) {
    int from = 0;
    int to = lines.size();
    while (from < to && lines.get(from).isBlank()) {
      from++;
    }
    while (to > from && lines.get(to - 1).isBlank()) {
      to--;
    }
    return lines.subList(from, to);
  }

  private static List<String> withoutRepeatedBlankLines(List<String> lines) {
    List<String> kept = new ArrayList<>();
    for (String line : lines) {
      if (!(line.isBlank() && !kept.isEmpty() && kept.get(kept.size() - 1).isBlank())) {
        kept.add(line);
      }
    }
    return kept;
  }

  private static List<String> dedent(List<String> lines) {
    int indentation =
        lines.stream()
            .filter(line -> !line.isBlank())
            .mapToInt(line -> line.length() - line.stripLeading().length())
            .min()
            .orElse(0);
    return lines.stream()
        .map(line -> line.isBlank() ? "" : line.substring(indentation).stripTrailing())
        .toList();
  }
}
