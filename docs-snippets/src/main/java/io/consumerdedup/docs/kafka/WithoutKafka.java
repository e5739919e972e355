package io.consumerdedup.docs.kafka;

import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupResult;
import io.consumerdedup.core.IdempotentExecutor;

/** The engine for any caller with a business key (docs/kafka-clients.md). */
final class WithoutKafka {
  record Order(String number, String amount) {}

  record Receipt(String orderNumber) {}

  interface Bank {
    Receipt charge(Order order) throws Exception;
  }

  private WithoutKafka() {}

  static DedupResult<Receipt> charge(IdempotentExecutor executor, Bank bank, Order order) {
    String orderNo = order.number();
    // tag::execute[]
    DedupResult<Receipt> result =
        executor.execute(DedupKey.of("payment", orderNo), () -> bank.charge(order));
    // end::execute[]
    return result;
  }
}
