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

  /** Opens the scope of a transaction on this thread; end it with {@link Scope#end}. */
  public static Scope open() {
    Scope scope = new Scope(open.get());
    open.set(scope);
    return scope;
  }

  /** The news of one transaction, told if it commits. */
  public static final class Scope {
    private final @Nullable Scope enclosing;
    private final List<Runnable> news = new ArrayList<>();

    private Scope(@Nullable Scope enclosing) {
      this.enclosing = enclosing;
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
