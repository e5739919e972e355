package io.consumerdedup.bench;

import static org.assertj.core.api.Assertions.assertThat;

import io.consumerdedup.testing.TestDatabase;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * A run's checks look at what the variant left in its database, not only at what its handler
 * counted: a variant whose store never made a key's SUCCESS durable ran its handler once per key,
 * yet would run it again for that key after a restart, and its rate was bought by skipping a write.
 */
class VariantRunChecksTest {
  private static final int MESSAGES = 200;

  private static BenchBroker broker;
  private static BenchDatabase database;
  private static VariantRunner runner;

  @BeforeAll
  static void start() throws Exception {
    broker = BenchBroker.start();
    database = BenchDatabase.create(TestDatabase.baseUrl());
    Workload workload =
        Workload.produce(
            broker,
            "checks",
            BenchOptions.PARTITIONS,
            MESSAGES,
            BenchOptions.DUPLICATE_RATE,
            BenchOptions.VALUE_BYTES,
            1);
    runner = new VariantRunner(database, broker, workload, System.err);
  }

  @AfterAll
  static void stop() throws Exception {
    if (database != null) {
      database.close();
    }
    if (broker != null) {
      broker.close();
    }
  }

  @Test
  void aSoundRunPassesItsChecks() throws Exception {
    assertThat(runner.run(OursLoop.batched(), "sound").problems()).isEmpty();
  }

  @Test
  void aRunThatLeftAKeyWithoutItsSuccessMarkFailsItsChecks() throws Exception {
    VariantRun run = runner.run(losingOneMark(OursLoop.batched()), "lost-mark");

    assertThat(run.handlerRuns()).isEqualTo(run.workload().distinctKeys());
    assertThat(run.problems())
        .as("the problems of a run whose store left one key PROCESSING")
        .anySatisfy(problem -> assertThat(problem).contains("SUCCESS"));
  }

  /**
   * {@code variant}, whose run ends with one key's SUCCESS mark undone, as if the write had never
   * reached the database.
   */
  private static Variant losingOneMark(Variant variant) {
    return (Variant)
        Proxy.newProxyInstance(
            Variant.class.getClassLoader(),
            new Class<?>[] {Variant.class},
            (proxy, method, arguments) -> {
              Object result;
              try {
                result = method.invoke(variant, arguments);
              } catch (InvocationTargetException e) {
                throw e.getCause();
              }
              if (method.getName().equals("consume")) {
                database.execute(
                    "UPDATE "
                        + DedupTable.NAME
                        + " SET status = 'PROCESSING' WHERE biz_key = (SELECT min(biz_key) FROM "
                        + DedupTable.NAME
                        + ")");
              }
              return result;
            });
  }
}
