package io.consumerdedup.docs;

import static org.assertj.core.api.Assertions.assertThat;

import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * Every relative link and image of every Markdown file of the repository leads somewhere: the file
 * or directory exists, and a {@code #anchor} names a heading of the target page, as GitHub makes
 * anchors from headings. A page linking to itself without an anchor is refused too.
 */
class MarkdownLinksTest {
  /** {@code [text](target)}, {@code ![alt](target)}, with an optional title. */
  private static final Pattern INLINE_LINK =
      Pattern.compile("\\]\\(\\s*<?([^)\\s>]*)>?(?:\\s+\"[^\"]*\")?\\s*\\)");

  /** {@code [label]: target} */
  private static final Pattern REFERENCE_DEFINITION =
      Pattern.compile("^ {0,3}\\[[^\\]]+\\]:\\s*<?(\\S+?)>?(?:\\s.*)?$");

  private static final Pattern HTML_LINK = Pattern.compile("\\b(?:href|src)=\"([^\"]*)\"");
  private static final Pattern HTML_ANCHOR = Pattern.compile("<a\\s+(?:name|id)=\"([^\"]+)\"");
  private static final Pattern HEADING = Pattern.compile("^ {0,3}#{1,6}\\s+(.*?)(?:\\s+#+)?\\s*$");
  private static final Pattern CODE_SPAN = Pattern.compile("(`+)(.+?)\\1");
  private static final Pattern SCHEME = Pattern.compile("^[a-zA-Z][a-zA-Z0-9+.-]*:");

  private final Map<Path, Set<String>> anchors = new HashMap<>();

  @Test
  void everyRelativeLinkAndAnchorResolves() {
    Path root = MarkdownFile.repositoryRoot();
    List<String> problems = new ArrayList<>();
    int checked = 0;
    for (MarkdownFile file : MarkdownFile.all()) {
      for (int i = 0; i < file.lines.size(); i++) {
        if (file.inBlock[i]) {
          continue;
        }
        for (String target : targets(file.lines.get(i))) {
          checked++;
          String problem = check(root, file, target);
          if (problem != null) {
            problems.add(file.name() + ":" + (i + 1) + ": (" + target + ") " + problem);
          }
        }
      }
    }
    assertThat(problems).as("links that lead nowhere").isEmpty();
    assertThat(checked).as("links checked").isGreaterThan(50);
  }

  @Test
  void anchorsAreMadeAsGitHubMakesThem() {
    assertThat(
            slugs(
                List.of(
                    "## From \"a key is stuck\" to \"it is applied\", without SQL",
                    "## High availability (a primary and a standby)",
                    "### `@Transactional` listeners: the **when**",
                    "## See [the README](../README.md)",
                    "## Batches",
                    "## Batches")))
        .containsExactlyInAnyOrder(
            "from-a-key-is-stuck-to-it-is-applied-without-sql",
            "high-availability-a-primary-and-a-standby",
            "transactional-listeners-the-when",
            "see-the-readme",
            "batches",
            "batches-1");
  }

  /** Relative link targets on a line of prose: code spans left out. */
  private static List<String> targets(String line) {
    String prose = CODE_SPAN.matcher(line).replaceAll("");
    List<String> targets = new ArrayList<>();
    for (Pattern pattern : List.of(INLINE_LINK, REFERENCE_DEFINITION, HTML_LINK)) {
      Matcher matcher = pattern.matcher(prose);
      while (matcher.find()) {
        String target = matcher.group(1);
        if (!target.isEmpty() && !SCHEME.matcher(target).find() && !target.startsWith("//")) {
          targets.add(target);
        }
      }
    }
    return targets;
  }

  private String check(Path root, MarkdownFile file, String target) {
    int hash = target.indexOf('#');
    String pathPart = hash < 0 ? target : target.substring(0, hash);
    String anchor =
        hash < 0 ? null : URLDecoder.decode(target.substring(hash + 1), StandardCharsets.UTF_8);
    Path resolved;
    if (pathPart.isEmpty()) {
      resolved = file.path;
    } else {
      String decoded = URLDecoder.decode(pathPart.replace("+", "%2B"), StandardCharsets.UTF_8);
      resolved =
          (decoded.startsWith("/")
                  ? root.resolve(decoded.substring(1))
                  : file.path.resolveSibling(decoded))
              .normalize();
      if (!resolved.startsWith(root)) {
        return "leads out of the repository";
      }
      if (!Files.exists(resolved)) {
        return "no such file: " + root.relativize(resolved);
      }
      if (resolved.equals(file.path) && anchor == null) {
        return "the page links to itself: link to a section (#heading) or leave the link out";
      }
    }
    if (anchor == null || !resolved.toString().endsWith(".md")) {
      return null;
    }
    Set<String> known =
        anchors.computeIfAbsent(resolved, path -> anchorsOf(MarkdownFile.read(path)));
    return known.contains(anchor)
        ? null
        : "no heading #"
            + anchor
            + " in "
            + root.relativize(resolved).toString().replace('\\', '/');
  }

  private static Set<String> anchorsOf(MarkdownFile file) {
    List<String> headings = new ArrayList<>();
    Set<String> anchors = new HashSet<>();
    for (int i = 0; i < file.lines.size(); i++) {
      if (file.inBlock[i]) {
        continue;
      }
      String line = file.lines.get(i);
      if (HEADING.matcher(line).matches()) {
        headings.add(line);
      }
      Matcher html = HTML_ANCHOR.matcher(line);
      while (html.find()) {
        anchors.add(html.group(1));
      }
    }
    anchors.addAll(slugs(headings));
    return anchors;
  }

  /**
   * GitHub's anchors for these heading lines, in order: the heading's text (link targets, code and
   * emphasis marks dropped), lower case, without punctuation but {@code -} and {@code _}, spaces
   * turned into {@code -}; a repeated one gets {@code -1}, {@code -2}, ...
   */
  static List<String> slugs(List<String> headingLines) {
    Map<String, Integer> seen = new HashMap<>();
    List<String> slugs = new ArrayList<>();
    for (String line : headingLines) {
      Matcher heading = HEADING.matcher(line);
      if (!heading.matches()) {
        throw new IllegalArgumentException("not a heading: " + line);
      }
      String text =
          heading
              .group(1)
              .replaceAll("!?\\[([^\\]]*)\\]\\([^)]*\\)", "$1")
              .replaceAll("<[^>]+>", "");
      String slug =
          text.toLowerCase(Locale.ROOT)
              .replaceAll("[^\\p{L}\\p{M}\\p{N}\\p{Pc} -]", "")
              .replace(' ', '-');
      int count = seen.merge(slug, 1, Integer::sum);
      slugs.add(count == 1 ? slug : slug + "-" + (count - 1));
    }
    return slugs;
  }
}
