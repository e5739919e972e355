package io.consumerdedup.examples.scenario;

import io.consumerdedup.core.Outcome;
import io.consumerdedup.examples.DemoContext;
import io.consumerdedup.examples.ledger.Bank;
import io.consumerdedup.examples.ledger.EffectHandler;
import io.consumerdedup.examples.ledger.EffectKind;
import io.consumerdedup.examples.report.RunRow;
import io.consumerdedup.examples.report.ScenarioResult;
import io.consumerdedup.kafka.DedupShareLoop;
import io.consumerdedup.kafka.IdempotentRecordHandler;
import io.consumerdedup.kafka.KafkaDeadLetterPublisher;
import io.consumerdedup.kafka.RecordProcessor;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A work queue on a Kafka share group (KIP-932): two consumers take records of the same partition,
 * and the producer sent order Q-1 twice. Each copy goes to whichever consumer asks first, so both
 * consumers may charge it at the same time; without dedup the order is charged twice. With {@code
 * DedupShareLoop} the copy finds the key done (or held by the other consumer, and waits for it, its
 * record kept acquired): charged once.
 */
public final class ShareQueueScenario implements Scenario {
  private static final String KEY_HEADER = "order-no";

  @Override
  public String id() {
    return "share";
  }

  @Override
  public ScenarioResult run(DemoContext context) throws Exception {
    return new ScenarioResult(
        "9. Work queue (share group): two consumers of one partition, order Q-1 sent twice",
        "A share group hands each record to one consumer, any consumer: the two copies of Q-1 can"
            + " be charged by both consumers, even at the same time.",
        List.of(runOnce(context, false), runOnce(context, true)),
        List.of(
            "DedupShareLoop acknowledges each record by its outcome and keeps a copy that meets"
                + " the other consumer's claim acquired (RENEW) instead of releasing it"));
  }

  private RunRow runOnce(DemoContext context, boolean withDedup) throws Exception {
    try (ScenarioRun run = ScenarioRun.start(context, id(), ScenarioRun.mode(withDedup))) {
      run.ledger().open(EffectKind.CHARGE);
      String group = run.group("billing-queue");
      startAtEarliest(run.bootstrapServers(), group);
      run.send(KEY_HEADER, "Q-1", "charge 25.00");
      run.send(KEY_HEADER, "Q-1", "charge 25.00 (sent again)");
      run.send(KEY_HEADER, "Q-2", "charge 25.00");
      EffectHandler payments =
          new EffectHandler(
              run.ledger(), EffectKind.CHARGE, KEY_HEADER, Bank.healthy(), "billing", run.stats());
      Set<String> done = ConcurrentHashMap.newKeySet();
      Set<String> seen = ConcurrentHashMap.newKeySet();
      RecordProcessor<String, String> counted =
          withDedup
              ? counting(
                  ScenarioRun.idempotent(
                      run.executor(b -> b), group, "payment", KEY_HEADER, payments),
                  run,
                  seen,
                  done)
              : record -> {
                if (seen.add(record.partition() + "@" + record.offset())) {
                  run.stats().delivered();
                }
                try {
                  payments.handle(record);
                } catch (Exception e) {
                  throw new IllegalStateException(e);
                }
                done.add(record.partition() + "@" + record.offset());
                return Outcome.PROCESSED;
              };
      List<Thread> threads = new ArrayList<>();
      List<AutoCloseable> consumers = new ArrayList<>();
      try (KafkaProducer<String, String> dlt = producer(run.bootstrapServers());
          KafkaProducer<byte[], byte[]> rawDlt = rawProducer(run.bootstrapServers())) {
        for (String name : List.of("billing-1", "billing-2")) {
          Map<String, Object> config = consumerConfig(run.bootstrapServers(), group);
          if (withDedup) {
            DedupShareLoop<String, String> loop =
                DedupShareLoop.builder(config, List.of(run.topic()), counted)
                    .deadLetterHandler(
                        KafkaDeadLetterPublisher.builder(dlt)
                            .rawProducer(rawDlt) // for records the deserializer rejects
                            .groupId(group)
                            .build())
                    .holdBackOff(Duration.ofMillis(200), Duration.ofSeconds(1))
                    .build();
            consumers.add(loop);
            threads.add(new Thread(loop, name));
          } else {
            PlainShareConsumer plain = new PlainShareConsumer(config, run.topic(), counted);
            consumers.add(plain);
            threads.add(new Thread(plain, name));
          }
        }
        threads.forEach(Thread::start);
        long deadline = System.nanoTime() + run.settings().runTimeout().toNanos();
        while (done.size() < 3) {
          if (System.nanoTime() > deadline) {
            throw new TimeoutException("the share consumers did not finish the 3 records");
          }
          Thread.sleep(50);
        }
      } finally {
        for (AutoCloseable consumer : consumers) {
          consumer.close();
        }
        for (Thread thread : threads) {
          thread.join(10_000);
        }
      }
      return run.row(ScenarioRun.label(withDedup), withDedup, EffectKind.CHARGE, 2);
    }
  }

  /** The library's handler, counted for the report. */
  private static RecordProcessor<String, String> counting(
      IdempotentRecordHandler<String, String> handler,
      ScenarioRun run,
      Set<String> seen,
      Set<String> done) {
    return record -> {
      String coordinates = record.partition() + "@" + record.offset();
      if (seen.add(coordinates)) {
        run.stats().delivered();
      }
      Outcome outcome = handler.process(record);
      if (outcome == Outcome.DUPLICATE) {
        run.stats().duplicateSkipped();
      }
      done.add(coordinates);
      return outcome;
    };
  }

  /** A new share group starts at the latest record; this one starts at the earliest. */
  private static void startAtEarliest(String bootstrapServers, String group) throws Exception {
    try (Admin admin =
        Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers))) {
      admin
          .incrementalAlterConfigs(
              Map.of(
                  new ConfigResource(ConfigResource.Type.GROUP, group),
                  List.of(
                      new AlterConfigOp(
                          new ConfigEntry("share.auto.offset.reset", "earliest"),
                          AlterConfigOp.OpType.SET))))
          .all()
          .get();
    }
  }

  private static Map<String, Object> consumerConfig(String bootstrapServers, String group) {
    Map<String, Object> config = new HashMap<>();
    config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers);
    config.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
    config.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 1); // one record each, to share them out
    return config;
  }

  private static KafkaProducer<String, String> producer(String bootstrapServers) {
    return new KafkaProducer<>(
        Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers),
        new StringSerializer(),
        new StringSerializer());
  }

  private static KafkaProducer<byte[], byte[]> rawProducer(String bootstrapServers) {
    return new KafkaProducer<>(
        Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers),
        new ByteArraySerializer(),
        new ByteArraySerializer());
  }

  /** The naive share consumer: runs the handler for each record it gets, accepts it. */
  private static final class PlainShareConsumer implements Runnable, AutoCloseable {
    private final KafkaShareConsumer<String, String> consumer;
    private final RecordProcessor<String, String> handler;
    private volatile boolean running = true;

    PlainShareConsumer(
        Map<String, Object> config, String topic, RecordProcessor<String, String> handler) {
      this.consumer = new KafkaShareConsumer<>(config);
      this.handler = handler;
      consumer.subscribe(List.of(topic));
    }

    @Override
    public void run() {
      try {
        while (running) {
          for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
            handler.process(record); // acknowledged (ACCEPT) with the next poll
          }
        }
      } catch (org.apache.kafka.common.errors.WakeupException e) {
        // closing
      } finally {
        consumer.close();
      }
    }

    @Override
    public void close() {
      running = false;
      consumer.wakeup();
    }
  }
}
