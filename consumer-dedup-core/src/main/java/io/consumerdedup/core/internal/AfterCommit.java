package io.consumerdedup.core.internal;

import java.util.ArrayList;
import java.util.List;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What is said of a claim in the caller's transaction (mode TRANSACTIONAL) only once that
 * transaction commits: the claim's SUCCESS is the commit. Told as the handler returned, a record
 * whose transaction then rolled back (a later record of its poll failed, the commit failed, an
 * Error after the handler) was counted "processed", and counted again when its retry committed. The
 * transactions that this process opens itself ({@code TransactionBoundDataSource}) open a scope on
 * their thread; outside one, the news is told at once.
 *
 * <p>A try that is run again in other transactions if its own rolls back (a poll's transaction,
 * whose records then run one transaction each) holds all its news, of claims, duplicates and
 * failures too ({@link #tellOfTry}), until it commits: told as they happened, the rolled-back try's
 * were told again by the run that followed it, and the counters said two duplicates where one
 * record was skipped once.
 */
public final class AfterCommit {
  private static final Logger log = LoggerFactory.getLogger(AfterCommit.class);

  private static final ThreadLocal<@Nullable Scope> open = new ThreadLocal<>();

  private AfterCommit() {}

  /** Tells {@code news} once this thread's open transaction commits, or now if none is open. */
  public static void tell(Runnable news) {
    Scope scope = open.get();
    if (scope == null) {
      news.run();
    } else {
      scope.news.add(news);
    }
  }

  /**
   * Tells {@code news} of a try (a key claimed, a duplicate skipped, a handler's failure) now,
   * unless this thread is in a try that is run again if it rolls back ({@link
   * #openRetriedOnRollback}): then once that try commits.
   */
  public static void tellOfTry(Runnable news) {
    Scope held = held(open.get());
    if (held == null) {
      news.run();
    } else {
      held.news.add(news);
    }
  }

  /** Opens the scope of a transaction on this thread; end it with {@link Scope#end}. */
  public static Scope open() {
    return open(false);
  }

  /**
   * Opens the scope of a try that, if it rolls back, is run again in other transactions: nothing
   * said in it is told unless it commits, news of transactions within it that commit included.
   */
  public static Scope openRetriedOnRollback() {
    return open(true);
  }

  private static Scope open(boolean retriedOnRollback) {
    Scope scope = new Scope(open.get(), retriedOnRollback);
    open.set(scope);
    return scope;
  }

  private static @Nullable Scope held(@Nullable Scope scope) {
    for (Scope each = scope; each != null; each = each.enclosing) {
      if (each.retriedOnRollback) {
        return each;
      }
    }
    return null;
  }

  /** The news of one transaction, told if it commits. */
  public static final class Scope {
    private final @Nullable Scope enclosing;
    private final boolean retriedOnRollback;
    private final List<Runnable> news = new ArrayList<>();

    private Scope(@Nullable Scope enclosing, boolean retriedOnRollback) {
      this.enclosing = enclosing;
      this.retriedOnRollback = retriedOnRollback;
    }

    /**
     * Ends the scope: its news is told if the transaction {@code committed}, forgotten otherwise.
     * Never throws: the transaction's outcome is decided, and what a listener throws on hearing of
     * it is no failure of the work that committed.
     */
    public void end(boolean committed) {
      if (enclosing == null) {
        open.remove();
      } else {
        open.set(enclosing);
      }
      if (!committed) {
        return;
      }
      Scope held = held(enclosing);
      if (held != null) {
        held.news.addAll(news); // told if the try around this transaction commits too
        return;
      }
      for (Runnable each : news) {
        try {
          each.run();
        } catch (RuntimeException | Error e) {
          try {
            log.warn(
                "The DedupListener threw on hearing of a committed transaction's outcome; ignored",
                FailureTexts.loggable(e));
          } catch (RuntimeException | Error unlogged) {
            // Thrown on, it failed the work whose transaction committed.
          }
        }
      }
    }
  }
}
