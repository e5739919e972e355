package io.consumerdedup.core;

import java.util.Objects;

/** The state of a {@link DedupRecord}. */
public enum DedupStatus {
  /** A holder runs the handler under a lease; other deliveries are told "in progress". */
  PROCESSING,
  /** The handler completed; later deliveries of the key are duplicates while the record is kept. */
  SUCCESS,
  /** The handler threw; the next delivery of the key retries it. */
  FAILED,
  /**
   * A status this version of consumer-dedup does not know: a newer version sharing the table wrote
   * it (its migration widened the table's status check). Read with the text as stored ({@link
   * DedupRecord#storedStatus()}); what it means is the newer version's to say. A claim of its key
   * holds it like one in progress elsewhere ({@link DedupInProgressException}): not handled, not
   * dead-lettered, tried again later. {@link DedupAdmin} changes such a record only when forced.
   */
  UNKNOWN;

  /** The status the table's text {@code stored} names; {@link #UNKNOWN} for any other text. */
  public static DedupStatus ofStored(String stored) {
    Objects.requireNonNull(stored, "stored");
    for (DedupStatus status : values()) {
      if (status.name().equals(stored)) {
        return status;
      }
    }
    return UNKNOWN;
  }

  /** {@code stored}, checked to be the text of {@code status}, as a record or a count holds it. */
  static String requireStored(DedupStatus status, String stored) {
    if (ofStored(stored) != status) {
      throw new IllegalArgumentException(
          "The stored status '" + stored + "' is not one of status " + status);
    }
    return stored;
  }
}
