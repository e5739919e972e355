package io.consumerdedup.spring;

import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;

/**
 * {@link BatchListenerConsumerCommits}'s test with {@code consumer-dedup.claims-per-poll=false}:
 * the containers' consumers are then left as they are, and the consumer the batch listener is given
 * is the container's own. Its commit, made before the listener throws, must still wait for the
 * batch's outcomes: sent at once, it passed the FAILED records, and a stop before their retry lost
 * them.
 */
@SpringBootTest(
    classes = BatchListenerConsumerCommits.App.class,
    properties = "consumer-dedup.claims-per-poll=false")
class BatchListenerConsumerCommitClaimsPerRecordTest extends BatchListenerConsumerCommits {
  @Test
  void aCommitInsideAFailingBatchDoesNotPassItsRecordsWithClaimsPerRecord() throws Exception {
    assertACommitInsideAFailingBatchDoesNotPassItsRecords();
  }
}
