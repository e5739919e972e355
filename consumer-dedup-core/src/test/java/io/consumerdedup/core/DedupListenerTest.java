package io.consumerdedup.core;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class DedupListenerTest {

  @Test
  void aCompositePassesEachEventToEveryListenerInOrderPastOneThatThrows() {
    List<String> heard = new ArrayList<>();
    DedupListener first =
        new DedupListener() {
          @Override
          public void claimed(DedupKey key, int attempt) {
            heard.add("first " + key.bizKey() + " " + attempt);
          }
        };
    DedupListener throwing =
        new DedupListener() {
          @Override
          public void claimed(DedupKey key, int attempt) {
            throw new IllegalStateException("broken listener");
          }
        };
    DedupListener last =
        new DedupListener() {
          @Override
          public void claimed(DedupKey key, int attempt) {
            heard.add("last " + key.bizKey() + " " + attempt);
          }

          @Override
          public void purged(int count) {
            heard.add("last purged " + count);
          }
        };

    DedupListener composite = DedupListener.composite(List.of(first, throwing, last));
    composite.claimed(DedupKey.of("payment", "o-1"), 2);
    composite.purged(7);

    assertThat(heard).containsExactly("first o-1 2", "last o-1 2", "last purged 7");
  }
}
