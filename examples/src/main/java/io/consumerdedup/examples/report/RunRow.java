package io.consumerdedup.examples.report;

import io.consumerdedup.examples.ledger.EffectKind;

/**
 * One line of the report: what one consumer setup did with the scenario's messages, and whether the
 * effects match the business actions sent.
 *
 * @param label such as {@code with dedup}
 * @param withDedup whether the consumer ran behind the library (a wrong verdict then fails the
 *     demo)
 * @param effects how many times the effect was applied (ledger rows)
 * @param distinctActions how many distinct business actions (keys) were sent: the right number of
 *     effects
 */
public record RunRow(
    String label,
    boolean withDedup,
    EffectKind kind,
    int delivered,
    int handlerRuns,
    int effects,
    long balance,
    int duplicatesSkipped,
    int retries,
    int deadLettered,
    int distinctActions) {

  public static RunRow of(
      String label,
      boolean withDedup,
      EffectKind kind,
      RunStats stats,
      int effects,
      long balance,
      int distinctActions) {
    return new RunRow(
        label,
        withDedup,
        kind,
        stats.deliveredCount(),
        stats.handlerRunCount(),
        effects,
        balance,
        stats.duplicatesSkippedCount(),
        stats.retryCount(),
        stats.deadLetteredCount(),
        distinctActions);
  }

  /** OK, a double effect, or a lost message (fewer effects than actions). */
  public Verdict verdict() {
    if (effects > distinctActions) {
      return Verdict.DOUBLE_EFFECT;
    }
    if (effects < distinctActions) {
      return Verdict.LOST;
    }
    return balance == kind.balanceAfter(distinctActions) ? Verdict.OK : Verdict.WRONG_BALANCE;
  }

  /** The verdict as the report prints it, such as {@code DOUBLE CHARGE}. */
  public String verdictText() {
    return switch (verdict()) {
      case OK -> "OK";
      case DOUBLE_EFFECT ->
          switch (kind) {
            case CHARGE -> "DOUBLE CHARGE";
            case POINTS -> "DOUBLE POINTS";
            case COUPON -> "DOUBLE COUPON";
          };
      case LOST -> "LOST";
      case WRONG_BALANCE -> "WRONG BALANCE";
    };
  }

  /** What a run can show. */
  public enum Verdict {
    OK,
    DOUBLE_EFFECT,
    LOST,
    WRONG_BALANCE
  }
}
