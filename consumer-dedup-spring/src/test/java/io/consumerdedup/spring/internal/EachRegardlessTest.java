package io.consumerdedup.spring.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatCode;
import static org.assertj.core.api.Assertions.catchThrowable;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The step for each record of a batch runs whatever the step threw for another: a record whose
 * outcome is not written after one whose write met an {@code Error} is given back as if never run.
 */
class EachRegardlessTest {
  /** Notes the index, then throws its throwable, if any. */
  private static final EachRegardless.Step<List<Integer>, Map<Integer, Throwable>> NOTE_THEN_THROW =
      (ran, throwing, i) -> {
        ran.add(i);
        Throwable thrown = throwing.get(i);
        if (thrown instanceof Error error) {
          throw error;
        }
        if (thrown != null) {
          throw (RuntimeException) thrown;
        }
      };

  private final List<Integer> ran = new ArrayList<>();

  @Test
  void anErrorOnTheFirstItemStillRunsTheOthersAndIsRethrownWithTheLaterFailuresSuppressed() {
    OutOfMemoryError error = new OutOfMemoryError("Java heap space, on the first");
    IllegalStateException later = new IllegalStateException("refused, on the third");

    Throwable thrown =
        catchThrowable(
            () -> EachRegardless.run(ran, Map.of(0, error, 2, later), 0, 4, NOTE_THEN_THROW));

    assertThat(ran).as("items run").containsExactly(0, 1, 2, 3);
    assertThat(thrown).as("what is rethrown").isSameAs(error);
    assertThat(thrown.getSuppressed()).as("suppressed in it").containsExactly(later);
  }

  @Test
  void aRuntimeExceptionOnALaterItemIsRethrownAsItIs() {
    IllegalStateException failure = new IllegalStateException("refused, on the second");

    Throwable thrown =
        catchThrowable(() -> EachRegardless.run(ran, Map.of(2, failure), 1, 4, NOTE_THEN_THROW));

    assertThat(ran).as("items run, from the first asked").containsExactly(1, 2, 3);
    assertThat(thrown).as("what is rethrown").isSameAs(failure);
    assertThat(thrown.getSuppressed()).as("suppressed in it").isEmpty();
  }

  @Test
  void theSameThrowableThrownTwiceIsRethrownOnceWithoutSuppressingItself() {
    // The JVM may throw one preallocated OutOfMemoryError instance again and again.
    OutOfMemoryError error = new OutOfMemoryError("Java heap space, the same instance");

    Throwable thrown =
        catchThrowable(
            () -> EachRegardless.run(ran, Map.of(0, error, 1, error), 0, 3, NOTE_THEN_THROW));

    assertThat(ran).as("items run").containsExactly(0, 1, 2);
    assertThat(thrown).as("what is rethrown").isSameAs(error);
    assertThat(thrown.getSuppressed()).as("suppressed in it").isEmpty();
  }

  @Test
  void nothingIsThrownWhenEveryItemRuns() {
    assertThatCode(() -> EachRegardless.run(ran, Map.of(), 0, 2, NOTE_THEN_THROW))
        .doesNotThrowAnyException();
    assertThat(ran).as("items run").containsExactly(0, 1);
  }
}
