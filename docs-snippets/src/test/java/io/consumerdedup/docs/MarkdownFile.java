package io.consumerdedup.docs;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.jspecify.annotations.Nullable;

/**
 * A Markdown file of the repository, split into what the documentation checks need: its fenced code
 * blocks and its other lines (prose, headings, links).
 */
final class MarkdownFile {
  private static final Pattern FENCE_OPEN = Pattern.compile("^( *)(`{3,}|~{3,})\\s*([^`\\s]*).*$");

  /** A fenced code block: its language, its lines without the fence's indentation, and where. */
  record Block(
      String language,
      String indentation,
      int openLine,
      int closeLine,
      List<String> lines,
      @Nullable String lineBefore) {
    String text() {
      return String.join("\n", lines);
    }
  }

  final Path path;
  final List<String> lines;
  final List<Block> blocks = new ArrayList<>();

  /** Whether each line (0-based) is part of a fenced block, fences included. */
  final boolean[] inBlock;

  private MarkdownFile(Path path, List<String> lines) {
    this.path = path;
    this.lines = lines;
    this.inBlock = new boolean[lines.size()];
    parseBlocks();
  }

  static MarkdownFile read(Path path) {
    try {
      return new MarkdownFile(path, Files.readAllLines(path, StandardCharsets.UTF_8));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** The repository's root: the parent of this module's directory, where the README is. */
  static Path repositoryRoot() {
    Path root = Path.of("").toAbsolutePath().getParent();
    if (root == null || !Files.isRegularFile(root.resolve("README.md"))) {
      throw new IllegalStateException(
          "Run from the docs-snippets module's directory (Maven does): no README.md in " + root);
    }
    return root;
  }

  /** Whether an XML block of this page defines the Maven property {@code name}. */
  boolean definesProperty(String name) {
    return blocks.stream()
        .anyMatch(
            block -> block.language().equals("xml") && block.text().contains("<" + name + ">"));
  }

  /** Every .md file of the repository, build output and the Git directory left out. */
  static List<MarkdownFile> all() {
    Path root = repositoryRoot();
    try (Stream<Path> files = Files.walk(root)) {
      return files
          .filter(file -> file.toString().endsWith(".md") && Files.isRegularFile(file))
          .filter(
              file -> {
                for (Path part : root.relativize(file)) {
                  String name = part.toString();
                  if (name.equals("target") || name.equals(".git") || name.equals("node_modules")) {
                    return false;
                  }
                }
                return true;
              })
          .sorted()
          .map(MarkdownFile::read)
          .toList();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** The file's path from the repository root, with forward slashes, for messages. */
  String name() {
    return repositoryRoot().relativize(path).toString().replace('\\', '/');
  }

  private void parseBlocks() {
    int i = 0;
    while (i < lines.size()) {
      Matcher open = FENCE_OPEN.matcher(lines.get(i));
      if (!open.matches()) {
        i++;
        continue;
      }
      String indentation = open.group(1);
      String fence = open.group(2);
      int start = i;
      List<String> content = new ArrayList<>();
      i++;
      while (i < lines.size() && !closes(lines.get(i), fence)) {
        String line = lines.get(i);
        content.add(
            line.startsWith(indentation) ? line.substring(indentation.length()) : line.strip());
        i++;
      }
      for (int j = start; j <= Math.min(i, lines.size() - 1); j++) {
        inBlock[j] = true;
      }
      blocks.add(
          new Block(
              open.group(3),
              indentation,
              start,
              i,
              List.copyOf(content),
              start > 0 ? lines.get(start - 1).strip() : null));
      i++;
    }
  }

  private static boolean closes(String line, String fence) {
    String stripped = line.strip();
    return stripped.startsWith(fence)
        && stripped.chars().allMatch(c -> c == fence.charAt(0))
        && stripped.length() >= fence.length();
  }
}
