package io.consumerdedup.docs.testkit;

import static io.consumerdedup.docs.testkit.MyDatabase.dataSource;

import io.consumerdedup.core.DedupStore;
import io.consumerdedup.test.DedupStoreContract;
import org.junit.jupiter.api.AfterAll;

// tag::contract[]
class MyDedupStoreContractTest extends DedupStoreContract {
  private static final MyDedupStore store = new MyDedupStore(dataSource);

  // end::contract[]

  @AfterAll
  static void dropDatabase() {
    dataSource.close();
  }

  // tag::contract[]

  @Override
  protected DedupStore store() {
    return store;
  }
}
// end::contract[]
