package io.consumerdedup.faults;

import io.consumerdedup.testing.ChildJvm;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

/**
 * F14: a consumer whose JVM clock is ten minutes off. Leases are judged by the database clock only,
 * so a shifted clock must neither take a key over early nor write a lease that never expires. The
 * clock is really shifted: the child JVM runs under libfaketime ({@code LD_PRELOAD}), and the clock
 * each child reports is checked against this JVM's.
 *
 * <p>Consumers follow one another in one slot, each halting in the handler of a key (claimed, no
 * effect), so the next must take that key over: normal clock, then ten minutes ahead, then ten
 * minutes behind, then normal again. Every holder's lease, as written, must last the configured
 * lease by the database clock (an ahead holder's own clock would add ten minutes; a behind one's
 * would have it passed already). Every taker, started in advance and let into the group the moment
 * the holder died, must be told the key is in progress while the lease lives (no early takeover: an
 * ahead taker's clock would see it passed) and take it over within seconds after it ended (no lease
 * that never expires: a behind taker's clock would see ten more minutes).
 */
class ClockSkewFaultsTest {
  /**
   * Long enough for a taker, let into the group when its holder dies, to reach the key while the
   * lease lives: the group waits out the dead holder's session (6 s) before it hands the partition
   * on, so the taker has the rest of the lease. 3 s let it arrive after the lease, and so did 8 s
   * on a machine running two scenarios at a time and building other code (the scenario then tests
   * nothing, and fails saying so).
   */
  static final Duration LEASE = Duration.ofSeconds(14);

  static final Duration START = Duration.ofSeconds(60);
  static final Duration FINISH = Duration.ofSeconds(60);

  /** After the lease ended: the taker's hold back-off (at most 1 s) and a slow machine's slack. */
  static final Duration TAKEOVER_BOUND = Duration.ofSeconds(10);

  /**
   * How far a child's reported clock may be from the one meant (output read late, a slow start).
   */
  static final Duration CLOCK_TOLERANCE = Duration.ofSeconds(60);

  static final int RECORDS = 40;

  /** Where distributions put libfaketime (Debian and Ubuntu by architecture, Fedora, a build). */
  static final List<String> LIBFAKETIME =
      List.of(
          "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
          "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
          "/usr/lib64/faketime/libfaketime.so.1",
          "/usr/lib/faketime/libfaketime.so.1",
          "/usr/local/lib/faketime/libfaketime.so.1");

  /** A consumer's clock: its libfaketime offset (null: not shifted) and what it should report. */
  record Clock(String label, String faketime, Duration offset) {}

  static final Clock NORMAL = new Clock("normal clock", null, Duration.ZERO);
  static final Clock AHEAD = new Clock("clock 10 min ahead", "+10m", Duration.ofMinutes(10));
  static final Clock BEHIND = new Clock("clock 10 min behind", "-10m", Duration.ofMinutes(-10));

  @Test
  void f14AClockTenMinutesOffNeitherTakesOverEarlyNorHoldsALeaseForever() throws Exception {
    clockSkew(Target.PLAIN);
  }

  /** F14 on {@code target}: see the class comment. */
  static void clockSkew(Target target) throws Exception {
    Reliability.scenario(
        target,
        "F14 JVM clock 10 min off",
        "SEPARATE",
        false,
        LEASE,
        run -> {
          String libfaketime = libfaketime();
          run.produce(RECORDS, "order-");
          // The held keys lie in one partition, each after the one before, so every taker reaches
          // its predecessor's key before its own.
          int partition = run.produced.get(0).partition();
          List<String> ofPartition =
              run.produced.stream()
                  .filter(r -> r.partition() == partition)
                  .map(FaultRun.Produced::key)
                  .toList();
          List<String> held = List.of(ofPartition.get(2), ofPartition.get(5), ofPartition.get(8));
          List<Clock> clocks = List.of(NORMAL, AHEAD, BEHIND, NORMAL);
          List<ChildJvm> chain = new ArrayList<>();
          List<Long> leaseEnds = new ArrayList<>();
          List<String> reported = new ArrayList<>();
          List<String> leases = new ArrayList<>();
          List<Long> takeovers = new ArrayList<>();
          run.consumerArg("gated", "true");
          run.watchOffsets();
          ChildJvm next = startGated(run, clocks.get(0), held.get(0), libfaketime, reported);
          for (int i = 0; i < clocks.size(); i++) {
            ChildJvm current = next;
            chain.add(current);
            current.awaitLine("STARTED", START);
            current.send("go");
            if (i + 1 < clocks.size()) {
              // Started now, so it is ready to join the moment this one dies.
              String haltAt = i + 1 < held.size() ? held.get(i + 1) : null;
              next = startGated(run, clocks.get(i + 1), haltAt, libfaketime, reported);
            }
            if (i < held.size()) {
              run.awaitCrash(current, START);
              leaseEnds.add(checkLeaseAsWritten(run, clocks.get(i), held.get(i), leases));
            }
          }
          run.awaitDone(FINISH);
          for (int i = 0; i < held.size(); i++) {
            takeovers.add(
                checkTakeover(
                    run, clocks.get(i + 1), chain.get(i + 1), held.get(i), leaseEnds.get(i)));
          }
          run.notes.add("clocks reported " + String.join(", ", reported));
          run.notes.add(
              "leases written by holders with these clocks: "
                  + String.join(", ", leases)
                  + " ms by the database clock");
          run.notes.add(
              "each taker told the key was in progress while its lease lived, then took it over "
                  + takeovers.stream().map(String::valueOf).collect(Collectors.joining(", "))
                  + " ms after the lease ended");
        });
  }

  /** The first of {@link #LIBFAKETIME} present; the scenario fails (not skips) without one. */
  static String libfaketime() {
    return LIBFAKETIME.stream()
        .filter(path -> Files.isReadable(Path.of(path)))
        .findFirst()
        .orElseThrow(
            () ->
                new AssertionError(
                    "F14 shifts a consumer's clock with libfaketime, found in none of "
                        + LIBFAKETIME
                        + ". Install it: apt-get install -y --no-install-recommends faketime"
                        + " (Debian, Ubuntu) or dnf install libfaketime (Fedora)"));
  }

  /**
   * Starts a consumer with {@code clock} that waits for {@code go}, halting in the handler of
   * {@code haltAt} (null: none); checks the clock it reports is the one meant.
   */
  private static ChildJvm startGated(
      FaultRun run, Clock clock, String haltAt, String libfaketime, List<String> reported)
      throws InterruptedException {
    // Not FAKETIME_DONT_FAKE_MONOTONIC=1: with it, libfaketime's pthread_cond_timedwait makes the
    // JVM's timed waits (Object.wait, LockSupport.parkNanos) return at once. The monotonic clock
    // shifted by a constant is harmless.
    Map<String, String> environment =
        clock.faketime() == null
            ? Map.of()
            : Map.of("LD_PRELOAD", libfaketime, "FAKETIME", clock.faketime());
    ChildJvm child =
        run.start("a", haltAt == null ? null : "KEY:halt:" + haltAt, null, environment);
    String line = child.awaitLine("CLOCK ", START);
    long offset = Long.parseLong(line.substring("CLOCK ".length())) - System.currentTimeMillis();
    if (Math.abs(offset - clock.offset().toMillis()) > CLOCK_TOLERANCE.toMillis()) {
      throw new AssertionError(
          "the consumer meant to run with a "
              + clock.label()
              + " reported a clock "
              + offset
              + " ms from this JVM's: the clock was not shifted");
    }
    reported.add(clock.label() + " " + signed(Math.round(offset / 1000.0)) + " s");
    return child;
  }

  /**
   * Checks the lease its holder (dead now) wrote on {@code key}: as long as configured by the
   * database clock. Returns when it ends, in the database's epoch milliseconds.
   */
  private static long checkLeaseAsWritten(
      FaultRun run, Clock holder, String key, List<String> leases) {
    long length =
        run.queryLong(
            "SELECT coalesce(max("
                + run.database.epochMillis("lease_until")
                + " - "
                + run.database.epochMillis("updated_at")
                + "), -1) FROM consumer_dedup WHERE biz_key = ? AND status = 'PROCESSING'",
            key);
    if (length == -1) {
      throw new AssertionError(
          key + ", held by the consumer with a " + holder.label() + ", is not PROCESSING");
    }
    if (Math.abs(length - LEASE.toMillis()) > 1_000) {
      throw new AssertionError(
          "the consumer with a "
              + holder.label()
              + " wrote a lease of "
              + length
              + " ms on "
              + key
              + " instead of "
              + LEASE.toMillis());
    }
    leases.add(length + "");
    return run.queryLong(
        "SELECT "
            + run.database.epochMillis("lease_until")
            + " FROM consumer_dedup WHERE biz_key = ?",
        key);
  }

  /**
   * Checks that {@code taker} was told {@code key} was in progress while its lease lived, and
   * applied it after the lease ended and within {@link #TAKEOVER_BOUND}; returns how long after.
   */
  private static long checkTakeover(
      FaultRun run, Clock clock, ChildJvm taker, String key, long leaseEnd) {
    Pattern refused = Pattern.compile("in progress elsewhere.*" + Pattern.quote(key) + "(?![0-9])");
    if (taker.output().lines().noneMatch(line -> refused.matcher(line).find())) {
      throw new AssertionError(
          "the consumer with a "
              + clock.label()
              + " never found "
              + key
              + " in progress: it reached the key after its lease had passed, nothing was"
              + " tested; its output:\n"
              + DatabaseFaultsTest.tail(taker.output()));
    }
    long applied =
        run.queryLong(
            "SELECT coalesce("
                + run.database.epochMillis("min(at)")
                + ", -1) FROM effects WHERE biz_key = ?",
            key);
    long afterLease = applied - leaseEnd;
    if (applied == -1 || afterLease < 0 || afterLease > TAKEOVER_BOUND.toMillis()) {
      throw new AssertionError(
          "the consumer with a "
              + clock.label()
              + (applied == -1
                  ? " never applied " + key
                  : " applied " + key + " " + afterLease + " ms after its lease ended")
              + " (the database clock; expected 0 to "
              + TAKEOVER_BOUND.toMillis()
              + " ms)");
    }
    return afterLease;
  }

  private static String signed(long value) {
    return value >= 0 ? "+" + value : Long.toString(value);
  }
}
