package io.consumerdedup.docs.testkit;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.jdbc.JdbcDedupStore;
import java.time.Duration;
import java.util.Optional;
import javax.sql.DataSource;

/**
 * The "store of your own" that docs/testing.md checks with the contract: here it hands each call to
 * the JDBC store, as a store that adds something of its own (a cache, an audit) would.
 */
final class MyDedupStore implements DedupStore {
  private final JdbcDedupStore delegate;

  MyDedupStore(DataSource dataSource) {
    this.delegate = JdbcDedupStore.builder(dataSource).build();
  }

  @Override
  public ClaimResult claim(ClaimRequest request) {
    return delegate.claim(request);
  }

  @Override
  public ClaimResult claimInTransaction(ClaimRequest request) {
    return delegate.claimInTransaction(request);
  }

  @Override
  public boolean complete(ClaimResult.Claimed claim, Duration retention) {
    return delegate.complete(claim, retention);
  }

  @Override
  public boolean fail(ClaimResult.Claimed claim, String error, Duration retention) {
    return delegate.fail(claim, error, retention);
  }

  @Override
  public boolean renew(ClaimResult.Claimed claim, Duration lease) {
    return delegate.renew(claim, lease);
  }

  @Override
  public Optional<DedupRecord> find(DedupKey key) {
    return delegate.find(key);
  }

  @Override
  public int purge(int limit) {
    return delegate.purge(limit);
  }

  @Override
  public boolean release(ClaimResult.Claimed claim) {
    return delegate.release(claim);
  }
}
