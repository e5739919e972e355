package io.consumerdedup.kafka;

import io.consumerdedup.core.ClaimRequest;
import io.consumerdedup.core.ClaimResult;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStore;
import io.consumerdedup.core.DedupStoreUnavailableException;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;

/** A store that refuses every SUCCESS, as an unreachable database would, until told not to. */
final class SuccessRefusingStore implements DedupStore {
  private final DedupStore delegate;
  final AtomicInteger refusals = new AtomicInteger();
  volatile boolean refusing = true;

  SuccessRefusingStore(DedupStore delegate) {
    this.delegate = delegate;
  }

  private void refuseWhileRefusing() {
    if (refusing) {
      refusals.incrementAndGet();
      throw new DedupStoreUnavailableException("SUCCESS refused (injected)", null, null, null);
    }
  }

  @Override
  public boolean complete(ClaimResult.Claimed claim, Duration retention) {
    refuseWhileRefusing();
    return delegate.complete(claim, retention);
  }

  @Override
  public List<DedupKey> completeAll(List<ClaimResult.Claimed> claims, Duration retention) {
    refuseWhileRefusing();
    return delegate.completeAll(claims, retention);
  }

  @Override
  public ClaimCompleting claimCompleting(
      ClaimRequest request, List<ClaimResult.Claimed> completing, Duration retention) {
    refuseWhileRefusing();
    return delegate.claimCompleting(request, completing, retention);
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
  public List<ClaimResult> claimAll(List<ClaimRequest> requests) {
    return delegate.claimAll(requests);
  }

  @Override
  public boolean fail(ClaimResult.Claimed claim, String error, Duration retention) {
    return delegate.fail(claim, error, retention);
  }

  @Override
  public List<DedupKey> failAll(List<Failure> failures, Duration retention) {
    return delegate.failAll(failures, retention);
  }

  @Override
  public boolean renew(ClaimResult.Claimed claim, Duration lease) {
    return delegate.renew(claim, lease);
  }

  @Override
  public List<DedupKey> renewAll(List<ClaimResult.Claimed> claims, Duration lease) {
    return delegate.renewAll(claims, lease);
  }

  @Override
  public boolean release(ClaimResult.Claimed claim) {
    return delegate.release(claim);
  }

  @Override
  public List<DedupKey> releaseAll(List<ClaimResult.Claimed> claims) {
    return delegate.releaseAll(claims);
  }

  @Override
  public Optional<DedupRecord> find(DedupKey key) {
    return delegate.find(key);
  }

  @Override
  public int purge(int limit) {
    return delegate.purge(limit);
  }
}
