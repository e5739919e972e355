package io.consumerdedup.spring;

import io.consumerdedup.core.DedupClaim;
import io.consumerdedup.core.DedupClaims;
import io.consumerdedup.core.DedupException;
import io.consumerdedup.core.DedupInProgressException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.core.InProgressPolicy;
import io.consumerdedup.kafka.MissingKeyPolicy;
import io.consumerdedup.kafka.internal.RecordKeyResolver;
import io.consumerdedup.spring.internal.ConsumerPoll;
import io.consumerdedup.spring.internal.Coordinates;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.beans.factory.BeanFactory;

/**
 * One {@link Idempotent} record listener's claims for one poll: at the listener's first record of
 * the poll, the keys of that record and of every record after it are claimed in one statement
 * ({@link IdempotentExecutor#claimAll}), each derived as the listener call derives it; each call
 * then takes its record's claim, if the call derives the same key and fingerprint (a record
 * interceptor may have changed the record; a key expression over {@code #payload} sees the
 * converted payload only in the call). A record without such a claim is claimed alone, as without
 * claims per poll. The claims the listener never took are given back, without counting an attempt,
 * as soon as they cannot be taken any more ({@link ConsumerPoll}).
 */
final class PollClaims implements ConsumerPoll.Claims {
  private static final Logger log = LoggerFactory.getLogger(PollClaims.class);

  private final IdempotentExecutor executor;
  private final Map<Coordinates, Integer> indexes;
  private final List<IdempotentExecutor.Delivery> deliveries;

  /** Null when nothing was claimed (no key to claim, or the store could not be reached). */
  private final @Nullable DedupClaims claims;

  /** The claims handed to listener calls, by index. */
  private final Map<Integer, DedupClaim> taken = new HashMap<>();

  private boolean released;

  private PollClaims(
      IdempotentExecutor executor,
      Map<Coordinates, Integer> indexes,
      List<IdempotentExecutor.Delivery> deliveries,
      @Nullable DedupClaims claims) {
    this.executor = executor;
    this.indexes = indexes;
    this.deliveries = deliveries;
    this.claims = claims;
  }

  /**
   * Claims the keys of {@code records} (the listener's first record of the poll and those after it)
   * in one statement; records whose listener call failed lately are left to be claimed alone.
   */
  static PollClaims claim(
      IdempotentListenerMethod listener,
      IdempotentExecutor executor,
      MissingKeyPolicy missingKeyPolicy,
      @Nullable String groupId,
      @Nullable BeanFactory beanFactory,
      List<ConsumerRecord<?, ?>> records,
      ConsumerPoll poll) {
    Class<?> payloadClass = listener.readsPayload ? listener.shape.payloadType().resolve() : null;
    Map<Coordinates, Integer> indexes = new HashMap<>();
    List<IdempotentExecutor.Delivery> deliveries = new ArrayList<>();
    for (ConsumerRecord<?, ?> polled : records) {
      if (poll.failedLately(polled)) {
        continue;
      }
      @SuppressWarnings("unchecked")
      ConsumerRecord<Object, Object> record = (ConsumerRecord<Object, Object>) polled;
      Object value = record.value();
      if (payloadClass != null && !payloadClass.isInstance(value)) {
        continue; // converted for the call: its key is known only then
      }
      KeyEvaluation evaluation = KeyEvaluation.ofPolledRecord(listener, record, beanFactory);
      RecordKeyResolver<Object, Object> keys =
          evaluation.resolver(missingKeyPolicy, groupId, executor);
      try {
        Optional<DedupKey> key = keys.claimedKey(record);
        if (key.isPresent()) {
          deliveries.add(
              new IdempotentExecutor.Delivery(
                  key.get(), evaluation.fingerprint(), keys.source(record)));
          indexes.put(Coordinates.of(record), deliveries.size() - 1);
        }
      } catch (RuntimeException e) {
        // The call meets the same failure, and reports it for its record alone.
      }
    }
    DedupClaims claims = null;
    if (!deliveries.isEmpty()) {
      try {
        claims = executor.claimAhead(deliveries);
      } catch (DedupException e) {
        // Claiming together is an optimisation: each record is claimed on its own instead, and
        // meets the store's failure itself if it lasts.
        log.debug(
            "Could not claim {} keys together; claiming them one by one", deliveries.size(), e);
      } catch (RuntimeException e) {
        log.warn(
            "Could not claim {} keys together; claiming them one by one", deliveries.size(), e);
      } catch (Error e) {
        // Such as an OutOfMemoryError as the answer was read: the engine gave back what it had
        // answered, or remembers claims it could not answer as this process's own. Let through,
        // the Error stopped the container, and whoever took the partitions over found those keys
        // in progress for a whole lease; claimed alone, each record takes its own claim up at once,
        // and an Error that lasts meets its own claim and stops the container there.
        log.error(
            "Could not claim {} keys together; claiming them one by one", deliveries.size(), e);
      }
    }
    return new PollClaims(executor, indexes, deliveries, claims);
  }

  /**
   * The claim this poll holds for {@code record}, if it was claimed under {@code key} and {@code
   * fingerprint}, its lease is still held and its executor open: held (the listener runs, then ends
   * it) or a duplicate; null if the record is to be claimed alone.
   *
   * @throws io.consumerdedup.core.DedupInProgressException another consumer holds the key (unless
   *     the in-progress policy is WAIT: then null, and the claim of the record alone waits)
   * @throws io.consumerdedup.core.DedupKeyConflictException the stored fingerprint differs
   * @throws io.consumerdedup.core.DedupStoreException an earlier outcome of the key is not written
   *     yet, or a later copy of a key of the poll could not be claimed
   */
  @Nullable DedupClaim claimFor(
      ConsumerRecord<?, ?> record, DedupKey key, @Nullable String fingerprint) {
    if (released || claims == null) {
      return null;
    }
    if (executor.isClosed()) {
      // The application closed while its container was still in the poll (the container's stop
      // outlasted its timeout): the claims are no longer renewed and no SUCCESS can be written, so
      // a listener run on one would run again after a restart. Claimed alone, the record meets the
      // closed executor (retry later) and waits unapplied, as without claims per poll.
      return null;
    }
    Integer index = indexes.get(Coordinates.of(record));
    if (index == null) {
      return null;
    }
    IdempotentExecutor.Delivery delivery = deliveries.get(index);
    if (!delivery.key().equals(key) || !Objects.equals(delivery.fingerprint(), fingerprint)) {
      return null; // given back with the poll's other unused claims
    }
    if (taken.containsKey(index)) {
      return null; // the same record once more within the poll: claimed alone
    }
    DedupClaim claim;
    try {
      claim = claims.get(index);
    } catch (DedupInProgressException e) {
      if (executor.inProgressPolicy() == InProgressPolicy.WAIT) {
        return null; // the claim of the record alone waits, as the policy says
      }
      throw e;
    }
    if (!claim.isDuplicate() && claim.isLeaseLost()) {
      // Claimed with the poll, but its lease ran out unrenewed since (the database away, the
      // consumer stalled) or was taken over: another consumer may run the key. Claimed again,
      // alone, which says whether it may run; this claim goes back with the poll's unused ones.
      log.info(
          "The claim of {} made with its poll lost its lease before its record was reached;"
              + " claiming it again",
          claim.source());
      return null;
    }
    taken.put(index, claim);
    return claim;
  }

  @Override
  public void release() {
    if (released || claims == null) {
      released = true;
      return;
    }
    released = true;
    boolean inUse = false;
    for (DedupClaim claim : taken.values()) {
      inUse |= !claim.isDuplicate() && !claim.isEnded();
    }
    if (!inUse) {
      claims.releaseUnended(); // one statement
      return;
    }
    // A listener still runs with one of them: an asynchronous listener whose future outlived the
    // wait for it (the consumer thread was interrupted). Its claim ends when it completes; the
    // others are given back one by one, never the one in use.
    Map<DedupKey, Boolean> seen = new HashMap<>();
    for (int i = 0; i < deliveries.size(); i++) {
      if (seen.put(deliveries.get(i).key(), Boolean.TRUE) != null || taken.containsKey(i)) {
        continue; // a later copy is claimed only when asked for; a taken one is its call's
      }
      try {
        DedupClaim claim = claims.get(i);
        if (!claim.isDuplicate() && !claim.isEnded()) {
          claim.release();
        }
      } catch (RuntimeException e) {
        // Refused when claimed (in progress elsewhere, a conflict): nothing held.
      }
    }
  }
}
