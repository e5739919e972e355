package io.consumerdedup.core;

import java.time.Instant;
import java.util.Objects;
import java.util.Optional;
import org.jspecify.annotations.Nullable;

/**
 * A row of the dedup table, as read by {@link DedupStore#find(DedupKey)}. All times are the
 * database's.
 */
public final class DedupRecord {
  private final DedupKey key;
  private final DedupStatus status;
  private final String storedStatus;
  private final int attempts;
  private final String owner;
  private final @Nullable Instant leaseUntil;
  private final @Nullable String fingerprint;
  private final @Nullable String lastError;
  private final @Nullable String source;
  private final Instant createdAt;
  private final Instant updatedAt;
  private final Instant expiresAt;
  private final boolean leaseLive;

  /**
   * Builds a record; stores call this.
   *
   * @param leaseLive whether the lease was live by the database clock when the row was read
   */
  public DedupRecord(
      DedupKey key,
      DedupStatus status,
      int attempts,
      String owner,
      @Nullable Instant leaseUntil,
      @Nullable String fingerprint,
      @Nullable String lastError,
      @Nullable String source,
      Instant createdAt,
      Instant updatedAt,
      Instant expiresAt,
      boolean leaseLive) {
    this(
        key,
        status,
        status.name(),
        attempts,
        owner,
        leaseUntil,
        fingerprint,
        lastError,
        source,
        createdAt,
        updatedAt,
        expiresAt,
        leaseLive);
  }

  /**
   * Builds a record whose status column holds {@code storedStatus}: for {@link
   * DedupStatus#UNKNOWN}, the text a newer version wrote; else the status's name.
   *
   * @param leaseLive whether the lease was live by the database clock when the row was read
   * @throws IllegalArgumentException if {@code storedStatus} names another status than {@code
   *     status}
   */
  public DedupRecord(
      DedupKey key,
      DedupStatus status,
      String storedStatus,
      int attempts,
      String owner,
      @Nullable Instant leaseUntil,
      @Nullable String fingerprint,
      @Nullable String lastError,
      @Nullable String source,
      Instant createdAt,
      Instant updatedAt,
      Instant expiresAt,
      boolean leaseLive) {
    this.key = Objects.requireNonNull(key, "key");
    this.status = Objects.requireNonNull(status, "status");
    this.storedStatus = DedupStatus.requireStored(status, storedStatus);
    this.attempts = attempts;
    this.owner = Objects.requireNonNull(owner, "owner");
    this.leaseUntil = leaseUntil;
    this.fingerprint = fingerprint;
    this.lastError = lastError;
    this.source = source;
    this.createdAt = Objects.requireNonNull(createdAt, "createdAt");
    this.updatedAt = Objects.requireNonNull(updatedAt, "updatedAt");
    this.expiresAt = Objects.requireNonNull(expiresAt, "expiresAt");
    this.leaseLive = leaseLive;
  }

  public DedupKey key() {
    return key;
  }

  /** The status; {@link DedupStatus#UNKNOWN} for one a newer version wrote. */
  public DedupStatus status() {
    return status;
  }

  /**
   * The status as the table holds it: {@link #status()}'s name, or, for {@link
   * DedupStatus#UNKNOWN}, the text a newer version of consumer-dedup wrote.
   */
  public String storedStatus() {
    return storedStatus;
  }

  /** How many times the key was claimed; the fencing token of the current or last holder. */
  public int attempts() {
    return attempts;
  }

  /** The consumer instance holding (PROCESSING) or last holding the lease. */
  public String owner() {
    return owner;
  }

  /** Until when (database time) the holder's lease runs. */
  public Optional<Instant> leaseUntil() {
    return Optional.ofNullable(leaseUntil);
  }

  /**
   * Whether the record is PROCESSING under a lease that had not expired by the database clock when
   * the record was read: another consumer is working on the key.
   */
  public boolean isLeaseLive() {
    return status == DedupStatus.PROCESSING && leaseLive;
  }

  /** The payload fingerprint given with the first claim, if any. */
  public Optional<String> fingerprint() {
    return Optional.ofNullable(fingerprint);
  }

  /**
   * The error of the last failed attempt (exception class and message), if the last attempt failed.
   */
  public Optional<String> lastError() {
    return Optional.ofNullable(lastError);
  }

  /** Where the claiming delivery came from, such as {@code payments-0@42}. */
  public Optional<String> source() {
    return Optional.ofNullable(source);
  }

  public Instant createdAt() {
    return createdAt;
  }

  public Instant updatedAt() {
    return updatedAt;
  }

  /** When (database time) the retention purge may delete the record. */
  public Instant expiresAt() {
    return expiresAt;
  }

  @Override
  public String toString() {
    return "DedupRecord{"
        + key
        + ", "
        + storedStatus
        + ", attempts="
        + attempts
        + ", owner="
        + owner
        + (leaseUntil != null ? ", leaseUntil=" + leaseUntil : "")
        + (source != null ? ", source=" + source : "")
        + "}";
  }
}
