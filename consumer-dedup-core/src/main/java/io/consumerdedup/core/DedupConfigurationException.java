package io.consumerdedup.core;

import org.jspecify.annotations.Nullable;

/**
 * consumer-dedup is set up in a way that cannot keep its promise for this delivery, such as a
 * TRANSACTIONAL listener without a transaction on the dedup table's DataSource. The message says
 * what to configure. {@link Disposition#RETRY_LATER}: the delivery waits, logged at ERROR, until
 * the application is fixed; it is neither applied unprotected nor skipped.
 */
public class DedupConfigurationException extends DedupException {
  private static final long serialVersionUID = 1L;

  public DedupConfigurationException(
      String reason, @Nullable DedupKey key, @Nullable String source) {
    super(reason, key, source, null);
  }

  @Override
  public Disposition disposition() {
    return Disposition.RETRY_LATER;
  }
}
