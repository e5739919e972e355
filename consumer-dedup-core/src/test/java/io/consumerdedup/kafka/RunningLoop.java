package io.consumerdedup.kafka;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

/**
 * A {@link DedupPollLoop} running on its own thread, as an application runs it; closing it stops
 * the loop and rethrows whatever ended it abnormally.
 */
final class RunningLoop implements AutoCloseable {
  private final DedupPollLoop<?, ?> loop;
  private final ExecutorService thread = Executors.newSingleThreadExecutor();
  private final Future<?> run;

  private RunningLoop(DedupPollLoop<?, ?> loop) {
    this.loop = loop;
    this.run = thread.submit(loop);
  }

  static RunningLoop start(DedupPollLoop<?, ?> loop) {
    return new RunningLoop(loop);
  }

  boolean isRunning() {
    return !run.isDone();
  }

  @Override
  public void close() throws Exception {
    try {
      loop.close();
      run.get(30, TimeUnit.SECONDS);
    } finally {
      thread.shutdownNow();
    }
  }
}
