package io.consumerdedup.bench;

/** V0: a plain kafka-clients consumer without dedup; the handler runs for every message. */
final class PlainConsumer implements Variant {

  @Override
  public String id() {
    return "V0";
  }

  @Override
  public String title() {
    return "plain consumer, no dedup";
  }

  @Override
  public HandlerRuns expectedHandlerRuns() {
    return HandlerRuns.EVERY_MESSAGE;
  }

  @Override
  public void consume(RunContext context) throws Exception {
    PlainPollLoop.run(
        context,
        record -> {
          context.effects().apply(record);
          return true;
        });
  }
}
