package io.consumerdedup.docs.testkit;

import io.consumerdedup.docs.DocsDatabase;

/** The database of {@link MyDedupStoreContractTest}. */
final class MyDatabase {
  static final DocsDatabase dataSource = DocsDatabase.create("docs_my_store");

  private MyDatabase() {}
}
