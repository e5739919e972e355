package io.consumerdedup.kafka;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.Map;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.ShareConsumer;

/**
 * A real share consumer whose calls a test sees first: to refuse one, delay it, or note that it
 * returned, as the broker or a stalled thread would make them behave.
 */
final class InterceptedShareConsumer {
  private InterceptedShareConsumer() {}

  /** Sees one call of the consumer; {@code call.proceed()} makes it on the real consumer. */
  interface Interceptor {
    Object intercept(Method method, Object[] args, Call call) throws Throwable;
  }

  /** The call on the real consumer, throwing what it threw. */
  interface Call {
    Object proceed() throws Throwable;
  }

  @SuppressWarnings("unchecked")
  static <K, V> ShareConsumer<K, V> of(Map<String, Object> config, Interceptor interceptor) {
    KafkaShareConsumer<K, V> delegate = new KafkaShareConsumer<>(config);
    return (ShareConsumer<K, V>)
        Proxy.newProxyInstance(
            ShareConsumer.class.getClassLoader(),
            new Class<?>[] {ShareConsumer.class},
            (proxy, method, args) ->
                interceptor.intercept(
                    method,
                    args,
                    () -> {
                      try {
                        return method.invoke(delegate, args);
                      } catch (InvocationTargetException e) {
                        throw e.getCause();
                      }
                    }));
  }
}
