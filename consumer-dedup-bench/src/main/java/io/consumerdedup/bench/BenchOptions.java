package io.consumerdedup.bench;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * What the benchmark runs, from its arguments. Without arguments: 200,000 messages, three
 * repetitions, the heap after 1e5 and 1e6 records, the table-size sweep at 1e5 and 1e6 keys, and a
 * purge over a table of 1e6 rows, half of them expired.
 *
 * <pre>
 * --quick            5,000 messages, two repetitions, the heap after 1e4 and 1e5 records, a purge
 *                    of 1e5 rows: about three minutes
 * --big              adds 1e7 keys to the table-size sweep
 * --messages=N       messages in the workload
 * --repetitions=N    interleaved repetitions of the comparison
 * --sweep=none|N,N   the table sizes of the sweep, or none
 * --memory=none|N,M  the heap after N and after M records of one run of V7's application, or none
 * --purge-rows=N     rows in the table for the purge, half of them expired; 0 skips it
 * --variants=V0,V9   only these variants of the comparison (V6 reads the table V1 fills, so it
 *                    needs V1); a ratio whose variants did not run reads n/a
 * --crash-window     instead of all that, the crash window of mode SEPARATE: consumers in child
 *                    JVMs killed at random moments, and the records whose handler runs again
 * --kills=N          kills per path in the crash-window run (default 20; 400 messages per kill)
 * </pre>
 *
 * Arguments may also come as one string separated by spaces (as Maven passes {@code bench.args}).
 *
 * @param quick whether {@code --quick} was given
 * @param messages messages in the workload
 * @param repetitions interleaved repetitions of the comparison
 * @param sweepSizes the preloaded table sizes of the sweep; empty to skip it
 * @param memoryRecords the records done at the two heap measurements, the smaller first; empty to
 *     skip them
 * @param purgeRows rows in the table for the purge, half of them expired; 0 to skip it
 * @param crashWindow whether to measure the crash window instead of the comparison
 * @param kills kills per path in the crash-window run
 * @param variants the ids of the comparison's variants to run; empty for all of them
 */
public record BenchOptions(
    boolean quick,
    int messages,
    int repetitions,
    List<Long> sweepSizes,
    List<Integer> memoryRecords,
    long purgeRows,
    boolean crashWindow,
    int kills,
    List<String> variants) {

  /** Partitions of the workload's topic. */
  public static final int PARTITIONS = 4;

  /** Share of the messages that repeat an earlier business key. */
  public static final double DUPLICATE_RATE = 0.05;

  /** Size of each message's value. */
  public static final int VALUE_BYTES = 100;

  private static final long BIG_TABLE = 10_000_000;
  private static final List<Integer> MEMORY_RECORDS = List.of(100_000, 1_000_000);
  private static final List<Integer> QUICK_MEMORY_RECORDS = List.of(10_000, 100_000);
  private static final int MESSAGES_PER_KILL = 400;

  private static final String USAGE =
      "Arguments: [--quick] [--big] [--messages=N] [--repetitions=N] [--sweep=none|N,N,...]"
          + " [--memory=none|N,M] [--purge-rows=N] [--variants=V0,V1,...] [--crash-window [--kills=N]]";

  public BenchOptions {
    if (messages < 1 || repetitions < 1 || purgeRows < 0 || kills < 1) {
      throw new IllegalArgumentException(
          "messages, repetitions and kills must be at least 1 and purge rows at least 0: " + USAGE);
    }
    if (sweepSizes.stream().anyMatch(size -> size < 1)) {
      throw new IllegalArgumentException("Sweep sizes must be at least 1: " + sweepSizes);
    }
    sweepSizes = List.copyOf(sweepSizes);
    if (!memoryRecords.isEmpty()
        && (memoryRecords.size() != 2
            || memoryRecords.get(0) < 1
            || memoryRecords.get(0) >= memoryRecords.get(1))) {
      throw new IllegalArgumentException(
          "--memory takes two record counts, the smaller first, or none: " + memoryRecords);
    }
    memoryRecords = List.copyOf(memoryRecords);
    variants = List.copyOf(variants);
  }

  /**
   * Reads the arguments.
   *
   * @throws IllegalArgumentException naming an argument it does not know, and the usage
   */
  public static BenchOptions parse(String... args) {
    List<String> tokens =
        Arrays.stream(args)
            .flatMap(arg -> Arrays.stream(arg.trim().split("\\s+")))
            .filter(token -> !token.isEmpty())
            .toList();
    boolean quick = tokens.contains("--quick");
    boolean big = tokens.contains("--big");
    boolean crashWindow = tokens.contains("--crash-window");
    int kills = 20;
    Integer messagesGiven = null;
    int repetitions = quick ? 2 : 3;
    List<Long> sweep = new ArrayList<>(List.of(100_000L, 1_000_000L));
    List<Integer> memory = quick ? QUICK_MEMORY_RECORDS : MEMORY_RECORDS;
    long purgeRows = quick ? 100_000 : 1_000_000;
    List<String> variants = List.of();
    for (String token : tokens) {
      String value = token.substring(token.indexOf('=') + 1);
      if (token.equals("--quick") || token.equals("--big") || token.equals("--crash-window")) {
        // read above
      } else if (token.startsWith("--kills=")) {
        kills = parseInt(token, value);
      } else if (token.startsWith("--messages=")) {
        messagesGiven = parseInt(token, value);
      } else if (token.startsWith("--repetitions=")) {
        repetitions = parseInt(token, value);
      } else if (token.startsWith("--sweep=")) {
        sweep = value.equals("none") ? new ArrayList<>() : parseSizes(token, value);
      } else if (token.startsWith("--memory=")) {
        memory =
            value.equals("none")
                ? List.of()
                : parseSizes(token, value).stream().map(Long::intValue).toList();
      } else if (token.startsWith("--purge-rows=")) {
        purgeRows = parseInt(token, value);
      } else if (token.startsWith("--variants=")) {
        variants = Arrays.stream(value.split(",")).map(String::trim).toList();
      } else {
        throw new IllegalArgumentException("Unknown argument '" + token + "'. " + USAGE);
      }
    }
    // A crash-window run needs enough work for every kill to fall while records are handled.
    int messages =
        messagesGiven != null
            ? messagesGiven
            : crashWindow ? kills * MESSAGES_PER_KILL : quick ? 5_000 : 200_000;
    if (big && !sweep.contains(BIG_TABLE)) {
      sweep.add(BIG_TABLE);
    }
    return new BenchOptions(
        quick, messages, repetitions, sweep, memory, purgeRows, crashWindow, kills, variants);
  }

  private static int parseInt(String token, String value) {
    try {
      return Integer.parseInt(value.replace("_", ""));
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("Not a number in '" + token + "'. " + USAGE, e);
    }
  }

  private static List<Long> parseSizes(String token, String value) {
    List<Long> sizes = new ArrayList<>();
    for (String size : value.split(",")) {
      sizes.add((long) parseInt(token, size));
    }
    return sizes;
  }
}
