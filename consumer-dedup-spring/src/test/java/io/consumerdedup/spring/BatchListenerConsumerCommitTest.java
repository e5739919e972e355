package io.consumerdedup.spring;

import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;

/** {@link BatchListenerConsumerCommits}'s test with claims per poll, the default. */
@SpringBootTest(classes = BatchListenerConsumerCommits.App.class)
class BatchListenerConsumerCommitTest extends BatchListenerConsumerCommits {
  @Test
  void aCommitInsideAFailingBatchDoesNotPassItsRecords() throws Exception {
    assertACommitInsideAFailingBatchDoesNotPassItsRecords();
  }
}
