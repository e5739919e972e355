package io.consumerdedup.testing;

import io.consumerdedup.core.internal.FaultPoints;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;

/**
 * An application short of memory: handing a claim's outcome over (its SUCCESS or FAILED, each try)
 * meets an {@code OutOfMemoryError}. Installed as the {@link FaultPoints} hook; the test removes it
 * with {@code FaultPoints.install(null)} when it ends.
 */
public final class HandOverErrors {
  private HandOverErrors() {}

  /**
   * Has each hand-over of an outcome for which {@code strike} says so (asked once per hand-over, on
   * its thread) throw an {@code OutOfMemoryError}.
   *
   * @return how many hand-overs threw it
   */
  public static AtomicInteger strikeWhen(BooleanSupplier strike) {
    AtomicInteger struck = new AtomicInteger();
    FaultPoints.install(
        point -> {
          if (point == FaultPoints.Point.ENDING && strike.getAsBoolean()) {
            struck.incrementAndGet();
            throw new OutOfMemoryError("Java heap space, handing the outcome over");
          }
        });
    return struck;
  }
}
