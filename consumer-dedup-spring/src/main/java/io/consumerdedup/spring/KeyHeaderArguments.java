package io.consumerdedup.spring;

import java.lang.reflect.Method;
import java.util.LinkedHashSet;
import java.util.Set;
import org.jspecify.annotations.Nullable;
import org.springframework.core.DefaultParameterNameDiscoverer;
import org.springframework.core.MethodParameter;
import org.springframework.core.annotation.AnnotatedMethod;
import org.springframework.expression.Expression;
import org.springframework.expression.spel.SpelNode;
import org.springframework.expression.spel.ast.Indexer;
import org.springframework.expression.spel.ast.PropertyOrFieldReference;
import org.springframework.expression.spel.ast.StringLiteral;
import org.springframework.expression.spel.standard.SpelExpression;
import org.springframework.messaging.handler.annotation.Header;

/**
 * The headers an {@code @Idempotent} listener reads its key from and also takes as {@code @Header}
 * arguments: a record without one fails argument resolution before consumer-dedup sees the call,
 * which must still be reported as a missing key. Names match exactly: an argument
 * {@code @Header("no")} is not the key of {@code #headers['order-no']}; an argument {@code @Header}
 * without a name is named by its parameter, as spring-messaging names it.
 */
final class KeyHeaderArguments {
  private KeyHeaderArguments() {}

  /**
   * @param header the key header, or null
   * @param key the key expression, or null
   */
  static Set<String> of(Method method, @Nullable String header, @Nullable Expression key) {
    Set<String> keyHeaders = new LinkedHashSet<>();
    if (header != null) {
      keyHeaders.add(header);
    }
    if (key instanceof SpelExpression spel) {
      collectNames(spel.getAST(), keyHeaders);
    }
    Set<String> arguments = new LinkedHashSet<>();
    // As spring-messaging resolves them: parameter annotations of interfaces count too.
    for (MethodParameter parameter : new AnnotatedMethod(method).getMethodParameters()) {
      Header argument = parameter.getParameterAnnotation(Header.class);
      if (argument != null) {
        String name = argument.name().isEmpty() ? argument.value() : argument.name();
        if (name.isEmpty()) {
          // spring-messaging then looks the header up by the parameter's name.
          parameter.initParameterNameDiscovery(new DefaultParameterNameDiscoverer());
          name = parameter.getParameterName();
        }
        if (name != null && keyHeaders.contains(name)) {
          arguments.add(name);
        }
      }
    }
    return Set.copyOf(arguments);
  }

  /**
   * The names an expression can look a header up by: its string literals ({@code
   * #headers['order-no']}) and the bare names in an index ({@code #headers[orderNo]}).
   */
  private static void collectNames(SpelNode node, Set<String> names) {
    if (node instanceof StringLiteral literal
        && literal.getLiteralValue().getValue() instanceof String name) {
      names.add(name);
    }
    for (int i = 0; i < node.getChildCount(); i++) {
      SpelNode child = node.getChild(i);
      if (node instanceof Indexer && child instanceof PropertyOrFieldReference reference) {
        names.add(reference.getName());
      }
      collectNames(child, names);
    }
  }
}
