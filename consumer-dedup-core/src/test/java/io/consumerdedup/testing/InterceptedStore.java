package io.consumerdedup.testing;

import io.consumerdedup.core.DedupStore;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import org.jspecify.annotations.Nullable;

/**
 * A {@link DedupStore} in front of a real one that lets a test act on each call: before it reaches
 * the store (hold a statement "on the wire", fail it, count it) or around it (see what the store
 * answered, or answer something else).
 */
public final class InterceptedStore {

  /** Runs before each call of the store; what it throws is what the caller sees. */
  @FunctionalInterface
  public interface BeforeCall {
    void before(Method method, Object[] args) throws Throwable;
  }

  /**
   * Runs in place of each call of the store: what it returns or throws is what the caller sees.
   * {@code proceed} makes the call.
   */
  @FunctionalInterface
  public interface AroundCall {
    @Nullable Object around(Method method, Object[] args, Proceed proceed) throws Throwable;
  }

  /** The call on the real store: returns what the store answered, or throws what it threw. */
  @FunctionalInterface
  public interface Proceed {
    @Nullable Object call() throws Throwable;
  }

  private InterceptedStore() {}

  public static DedupStore before(DedupStore target, BeforeCall beforeCall) {
    return around(
        target,
        (method, args, proceed) -> {
          beforeCall.before(method, args);
          return proceed.call();
        });
  }

  public static DedupStore around(DedupStore target, AroundCall aroundCall) {
    return (DedupStore)
        Proxy.newProxyInstance(
            DedupStore.class.getClassLoader(),
            new Class<?>[] {DedupStore.class},
            (proxy, method, args) -> {
              Object[] arguments = args == null ? new Object[0] : args;
              return aroundCall.around(
                  method,
                  arguments,
                  () -> {
                    try {
                      return method.invoke(target, arguments);
                    } catch (InvocationTargetException e) {
                      throw e.getCause();
                    }
                  });
            });
  }
}
