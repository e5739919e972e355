package io.consumerdedup.examples.ledger;

import io.consumerdedup.examples.report.RunStats;
import io.consumerdedup.kafka.RecordHandler;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;

/**
 * The application's consumer code, the same with and without dedup: call the bank, then book the
 * effect named by the record's business-key header. It knows nothing about the library; the "with
 * dedup" runs wrap it in an {@link io.consumerdedup.kafka.IdempotentRecordHandler}.
 */
public final class EffectHandler implements RecordHandler<String, String> {
  private final Ledger ledger;
  private final EffectKind kind;
  private final String keyHeader;
  private final Bank bank;
  private final String appliedBy;
  private final RunStats stats;

  public EffectHandler(
      Ledger ledger,
      EffectKind kind,
      String keyHeader,
      Bank bank,
      String appliedBy,
      RunStats stats) {
    this.ledger = ledger;
    this.kind = kind;
    this.keyHeader = keyHeader;
    this.bank = bank;
    this.appliedBy = appliedBy;
    this.stats = stats;
  }

  @Override
  public void handle(ConsumerRecord<String, String> record) throws Exception {
    stats.handlerRan();
    String businessKey = businessKey(record);
    bank.authorize(businessKey);
    ledger.apply(kind, businessKey, appliedBy);
  }

  private String businessKey(ConsumerRecord<String, String> record) {
    Header header = record.headers().lastHeader(keyHeader);
    if (header == null) {
      throw new IllegalArgumentException(
          "Record " + record.topic() + "@" + record.offset() + " has no " + keyHeader + " header");
    }
    return new String(header.value(), StandardCharsets.UTF_8);
  }
}
