package io.consumerdedup.testing;

import io.consumerdedup.core.DedupStore;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;

/**
 * A {@link DedupStore} in front of a real one that lets a test act before each call reaches it:
 * hold a statement "on the wire", fail it, or count it.
 */
public final class InterceptedStore {

  /** Runs before each call of the store; what it throws is what the caller sees. */
  @FunctionalInterface
  public interface BeforeCall {
    void before(Method method, Object[] args) throws Throwable;
  }

  private InterceptedStore() {}

  public static DedupStore before(DedupStore target, BeforeCall beforeCall) {
    return (DedupStore)
        Proxy.newProxyInstance(
            DedupStore.class.getClassLoader(),
            new Class<?>[] {DedupStore.class},
            (proxy, method, args) -> {
              beforeCall.before(method, args);
              try {
                return method.invoke(target, args);
              } catch (InvocationTargetException e) {
                throw e.getCause();
              }
            });
  }
}
