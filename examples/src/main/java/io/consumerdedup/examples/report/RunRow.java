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
 * @param actionsApplied how many distinct business actions (keys) the effects were for: fewer than
 *     {@code effects} if one action was applied twice, even when another, lost, leaves the count of
 *     effects right
 * @param distinctActions how many distinct business actions (keys) were sent: the right number of
 *     effects
 * @param windowEffects how many effects beyond one per action this run is expected to show because
 *     it reproduces, on purpose, the documented window of {@code DedupMode.SEPARATE} (a crash
 *     between the side effect and SUCCESS); 0 for every other run
 */
public record RunRow(
    String label,
    boolean withDedup,
    EffectKind kind,
    int delivered,
    int handlerRuns,
    int effects,
    int actionsApplied,
    long balance,
    int duplicatesSkipped,
    int retries,
    int deadLettered,
    int distinctActions,
    int windowEffects) {

  public static RunRow of(
      String label,
      boolean withDedup,
      EffectKind kind,
      RunStats stats,
      int effects,
      int actionsApplied,
      long balance,
      int distinctActions) {
    return new RunRow(
        label,
        withDedup,
        kind,
        stats.deliveredCount(),
        stats.handlerRunCount(),
        effects,
        actionsApplied,
        balance,
        stats.duplicatesSkippedCount(),
        stats.retryCount(),
        stats.deadLetteredCount(),
        distinctActions,
        0);
  }

  /**
   * This row, for a run that reproduces the documented window on purpose: {@code windowEffects}
   * effects beyond one per action are then reported as the window, not as a failure of dedup.
   */
  public RunRow expectingWindowEffects(int windowEffects) {
    return new RunRow(
        label,
        withDedup,
        kind,
        delivered,
        handlerRuns,
        effects,
        actionsApplied,
        balance,
        duplicatesSkipped,
        retries,
        deadLettered,
        distinctActions,
        windowEffects);
  }

  /**
   * OK, a double effect (an action applied more than once; the documented window's, if exactly as
   * many extra effects as the run expects and none lost), a lost message (an action never applied),
   * or a fault that did not happen (no record delivered more often than there are actions).
   */
  public Verdict verdict() {
    // Counted per action, not in total: one action applied twice and another never would
    // otherwise add up to one effect per action.
    if (effects > actionsApplied) {
      return effects - actionsApplied == windowEffects && actionsApplied == distinctActions
          ? Verdict.DOUBLE_EFFECT_IN_WINDOW
          : Verdict.DOUBLE_EFFECT;
    }
    if (actionsApplied < distinctActions) {
      return Verdict.LOST;
    }
    // Every scenario hands some action to a consumer more than once: without that, one effect per
    // action proves nothing about dedup (a consumer that never saw the duplicate looks the same).
    if (delivered <= distinctActions) {
      return Verdict.FAULT_NOT_REPRODUCED;
    }
    return balance == kind.balanceAfter(distinctActions) ? Verdict.OK : Verdict.WRONG_BALANCE;
  }

  /**
   * The verdict as the report prints it, such as {@code DOUBLE CHARGE}, or {@code DOUBLE CHARGE
   * (window)} for the documented window.
   */
  public String verdictText() {
    return switch (verdict()) {
      case OK -> "OK";
      case DOUBLE_EFFECT -> doubleEffectText();
      case DOUBLE_EFFECT_IN_WINDOW -> doubleEffectText() + " (window)";
      case LOST -> "LOST";
      case FAULT_NOT_REPRODUCED -> "FAULT NOT REPRODUCED";
      case WRONG_BALANCE -> "WRONG BALANCE";
    };
  }

  private String doubleEffectText() {
    return switch (kind) {
      case CHARGE -> "DOUBLE CHARGE";
      case POINTS -> "DOUBLE POINTS";
      case COUPON -> "DOUBLE COUPON";
    };
  }

  /** What a run can show. */
  public enum Verdict {
    OK,
    DOUBLE_EFFECT,
    /**
     * A double effect the library documents and the run reproduces on purpose (a crash between the
     * side effect and SUCCESS in {@code DedupMode.SEPARATE}): expected, so not a failure.
     */
    DOUBLE_EFFECT_IN_WINDOW,
    LOST,
    /**
     * No action reached a consumer twice: the scenario's redelivery or repeated message did not
     * happen, so the run shows nothing, whatever its effects.
     */
    FAULT_NOT_REPRODUCED,
    WRONG_BALANCE;

    /** Whether a run behind the library may end so: exactly once, or in its documented window. */
    public boolean asDocumented() {
      return this == OK || this == DOUBLE_EFFECT_IN_WINDOW;
    }
  }
}
