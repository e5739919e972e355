package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.jdbc.JdbcDedupStore;
import org.jspecify.annotations.Nullable;
import org.springframework.beans.factory.InitializingBean;

/**
 * Checks at start-up that the dedup table exists with every column the store uses (after {@code
 * consumer-dedup.initialize-schema=always} had its chance to create it): a forgotten migration
 * stops the application with the fix, instead of failing every record, and so does a database the
 * store does not support (H2, say), and a JDBC URL that no driver accepts. A database that cannot
 * be reached at start-up is only logged: records wait for it like for any outage.
 */
public final class DedupTableVerifier implements InitializingBean {

  private final JdbcDedupStore store;

  /**
   * @param initializer the schema initializer, if any: taken so that it runs first
   */
  public DedupTableVerifier(JdbcDedupStore store, @Nullable Object initializer) {
    this.store = store;
  }

  @Override
  public void afterPropertiesSet() {
    // The check itself is the core's, for every dialect; an unreachable database is only logged,
    // a URL that no driver accepts refused.
    store.verifyReady();
  }
}
