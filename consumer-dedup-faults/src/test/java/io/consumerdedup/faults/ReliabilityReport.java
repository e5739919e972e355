package io.consumerdedup.faults;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * Prints the fault matrix of the run (a Markdown table, pasted as is into docs/reliability.md) and
 * the one RELIABILITY line, and exits non-zero when a scenario failed, a test outside the scenarios
 * failed, or no scenario ran. Arguments: the results directory, the surefire reports directory.
 */
public final class ReliabilityReport {
  private static final Pattern SUITE_TAG = Pattern.compile("<testsuite\\s[^>]*>");

  /**
   * The columns of the {@code scenarios-<pid>.tsv} files, as {@link Reliability#record} writes
   * them.
   */
  private static final List<String> COLUMNS =
      List.of(
          "scenario",
          "mode",
          "result",
          "records",
          "lost",
          "duplicates",
          "window",
          "kills",
          "dead-lettered",
          "recovery ms",
          "bound ms",
          "what was checked",
          "violations");

  private ReliabilityReport() {}

  public static void main(String[] args) throws IOException {
    Path results = Path.of(args[0]);
    Path reports = Path.of(args[1]);
    List<String[]> rows = new ArrayList<>();
    if (Files.isDirectory(results)) {
      try (Stream<Path> files = Files.list(results)) {
        for (Path file :
            files
                .filter(
                    f ->
                        f.getFileName().toString().startsWith(Reliability.SCENARIOS_PREFIX)
                            && f.getFileName().toString().endsWith(Reliability.SCENARIOS_SUFFIX))
                .sorted()
                .toList()) {
          Files.readAllLines(file, StandardCharsets.UTF_8).stream()
              .filter(line -> !line.isBlank())
              .map(line -> line.split("\t", -1))
              .forEach(rows::add);
        }
      }
    }
    String seed =
        Files.exists(results.resolve(Reliability.SEED_FILE))
            ? Files.readString(results.resolve(Reliability.SEED_FILE)).trim()
            : "none";
    System.out.println();
    System.out.println("| " + String.join(" | ", COLUMNS.subList(0, 12)) + " |");
    System.out.println("|" + "---|".repeat(12));
    for (String[] row : rows) {
      System.out.println("| " + String.join(" | ", List.of(row).subList(0, 12)) + " |");
    }
    int failed = 0;
    long lost = 0;
    long duplicatesSeparate = 0;
    long window = 0;
    long duplicatesTransactional = 0;
    long failoverReRuns = 0;
    long failoverMissing = 0;
    for (String[] row : rows) {
      if (!row[2].equals("passed")) {
        failed++;
        System.out.println("FAILED " + row[0] + ": " + row[12]);
      }
      lost += Long.parseLong(row[4]);
      if (row[1].equals(FailoverFaultsTest.FAILOVER_MODE)) {
        failoverReRuns += Long.parseLong(row[5]);
        failoverMissing += Long.parseLong(row[6]);
      } else if (row[1].startsWith("TRANSACTIONAL")) {
        duplicatesTransactional += Long.parseLong(row[5]);
      } else {
        duplicatesSeparate += Long.parseLong(row[5]);
        window += Long.parseLong(row[6]);
      }
    }
    Path seedFile = results.resolve(Reliability.SEED_FILE);
    long runStarted = Files.exists(seedFile) ? Files.getLastModifiedTime(seedFile).toMillis() : 0;
    int testFailures = surefireCount(reports, runStarted, "failures", "errors");
    // A scenario whose database is not there (MariaDB without DEDUP_TEST_MARIADB_URL) is skipped,
    // with the reason in the test output; it is not expected in the report. Not in CI, which is
    // there to run them all: a server missing there would pass the suite with scenarios unrun.
    int skipped = surefireCount(reports, runStarted, "skipped");
    boolean skippedInCi = skipped > 0 && "true".equals(System.getenv("CI"));
    if (skipped > 0) {
      System.out.println(skipped + " scenario(s) skipped (see the test output for why)");
    }
    System.out.println();
    System.out.printf(
        "RELIABILITY scenarios=%d failed=%d lost=%d duplicates_separate=%d kills_after_handler=%d"
            + " duplicates_transactional=%d failover_reruns=%d failover_missing_rows=%d seed=%s%n",
        rows.size(),
        Math.max(failed, testFailures),
        lost,
        duplicatesSeparate,
        window,
        duplicatesTransactional,
        failoverReRuns,
        failoverMissing,
        seed);
    boolean chosen = args.length > 2 && !args[2].isBlank() && !args[2].startsWith("${");
    int expected = chosen ? rows.size() : scenarioTests() - skipped;
    if (rows.isEmpty() || failed > 0 || testFailures > 0 || rows.size() < expected || skippedInCi) {
      System.out.println(
          "The fault-injection suite failed: "
              + (rows.size() < expected
                  ? rows.size() + " of " + expected + " scenarios reported (the test JVM died?)"
                  : failed > 0 || testFailures > 0 || rows.isEmpty()
                      ? failed + " scenario(s), " + testFailures + " test(s)"
                      : skipped
                          + " scenario(s) skipped in CI (CI=true): a server they need is"
                          + " missing"));
      System.exit(1);
    }
  }

  /**
   * The scenarios of the suite: each test method of its test classes is one. The classes are found
   * beside this one (every {@code *Test} class of the package), so a new class cannot be left out
   * and a test JVM killed before it reported is counted as missing scenarios.
   */
  private static int scenarioTests() throws IOException {
    Path classes;
    try {
      classes =
          Path.of(
                  ReliabilityReport.class
                      .getProtectionDomain()
                      .getCodeSource()
                      .getLocation()
                      .toURI())
              .resolve(ReliabilityReport.class.getPackageName().replace('.', '/'));
    } catch (java.net.URISyntaxException e) {
      throw new IOException(e);
    }
    List<String> names;
    try (Stream<Path> files = Files.list(classes)) {
      names =
          files
              .map(file -> file.getFileName().toString())
              .filter(name -> name.endsWith("Test.class"))
              .map(name -> name.substring(0, name.length() - ".class".length()))
              .toList();
    }
    int count = 0;
    for (String name : names) {
      Class<?> suite;
      try {
        suite = Class.forName(ReliabilityReport.class.getPackageName() + "." + name);
      } catch (ClassNotFoundException e) {
        throw new IOException(e);
      }
      for (java.lang.reflect.Method method : suite.getDeclaredMethods()) {
        if (method.isAnnotationPresent(org.junit.jupiter.api.Test.class)) {
          count++;
        }
      }
    }
    return count;
  }

  /**
   * The sum of the counts {@code attributes} (failures, errors, skipped) of every test class of
   * this run (reports older than its start are left from an earlier run), from surefire's XML
   * reports.
   */
  private static int surefireCount(Path reports, long runStarted, String... attributes)
      throws IOException {
    if (!Files.isDirectory(reports)) {
      return 0;
    }
    int total = 0;
    try (Stream<Path> files = Files.list(reports)) {
      List<Path> xmls =
          files
              .filter(p -> p.getFileName().toString().endsWith(".xml"))
              .filter(p -> p.toFile().lastModified() >= runStarted)
              .toList();
      for (Path xml : xmls) {
        Matcher tag = SUITE_TAG.matcher(Files.readString(xml));
        if (tag.find()) {
          for (String attribute : attributes) {
            Matcher m = Pattern.compile("\\s" + attribute + "=\"(\\d+)\"").matcher(tag.group());
            if (m.find()) {
              total += Integer.parseInt(m.group(1));
            }
          }
        }
      }
    }
    return total;
  }
}
