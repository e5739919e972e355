package io.consumerdedup.spring;

import io.consumerdedup.spring.internal.EditDistance;
import java.beans.PropertyDescriptor;
import java.lang.annotation.Annotation;
import java.lang.reflect.Field;
import java.lang.reflect.Member;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.lang.reflect.RecordComponent;
import java.lang.reflect.Type;
import java.lang.reflect.TypeVariable;
import java.lang.reflect.WildcardType;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.Deque;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jspecify.annotations.Nullable;
import org.springframework.beans.BeanUtils;
import org.springframework.core.ResolvableType;
import org.springframework.expression.Expression;
import org.springframework.expression.spel.SpelNode;
import org.springframework.expression.spel.ast.CompoundExpression;
import org.springframework.expression.spel.ast.FunctionReference;
import org.springframework.expression.spel.ast.Indexer;
import org.springframework.expression.spel.ast.MethodReference;
import org.springframework.expression.spel.ast.Projection;
import org.springframework.expression.spel.ast.PropertyOrFieldReference;
import org.springframework.expression.spel.ast.Selection;
import org.springframework.expression.spel.ast.StringLiteral;
import org.springframework.expression.spel.ast.VariableReference;
import org.springframework.expression.spel.standard.SpelExpression;
import org.springframework.expression.spel.support.ReflectivePropertyAccessor;
import org.springframework.util.ClassUtils;

/**
 * The start-up check of a key or fingerprint expression against what is known before any record:
 * the variables it is evaluated with, that it has no root object, and the declared type of the
 * payload. What it refuses would fail on every record (each one dead-lettered as a malformed key),
 * or, like {@code order-no} parsed as {@code order - no}, never give a key at all. Where the
 * payload type is not known at start-up (Object, an interface, a Map, a type variable), a property
 * of it is left to run time; a JSON tree's field read as a property is refused.
 */
final class KeyExpressionCheck {
  /** The variables a key or fingerprint expression is evaluated with. */
  static final String PAYLOAD = "payload";

  static final String HEADERS = "headers";
  static final String RECORD = "record";
  static final String TOPIC = "topic";

  private static final List<String> VARIABLES = List.of(PAYLOAD, HEADERS, RECORD, TOPIC);
  static final String VARIABLE_LIST = "#payload, #headers, #record and #topic";

  private static final String NO_ROOT =
      " but the expression has no root object: it reads the record through " + VARIABLE_LIST;

  /** Variables that SpEL defines itself. */
  private static final Set<String> SPEL_VARIABLES = Set.of("root", "this");

  /** What a header name put in {@code key} looks like. */
  private static final Pattern HEADER_NAME = Pattern.compile("[A-Za-z0-9_][A-Za-z0-9_.\\-]*");

  private static final Readers READERS = new Readers();

  private static final String JSON_SUB_TYPES = "com.fasterxml.jackson.annotation.JsonSubTypes";

  /** The most subtypes of one payload type searched for a property. */
  private static final int MAX_SUBTYPES = 256;

  private final String attribute;
  private final String text;
  private final ResolvableType payload;

  private KeyExpressionCheck(String attribute, String text, ResolvableType payload) {
    this.attribute = attribute;
    this.text = text;
    this.payload = payload;
  }

  /**
   * @param attribute {@code key} or {@code fingerprint}
   * @param payload the declared type of {@code #payload}, {@link ResolvableType#NONE} if unknown
   * @return why the expression cannot work, or null
   */
  static @Nullable ListenerRefusal check(
      String attribute, Expression expression, ResolvableType payload) {
    if (!(expression instanceof SpelExpression spel)) {
      return null;
    }
    return new KeyExpressionCheck(attribute, spel.getExpressionString(), payload)
        .visit(spel.getAST(), null, 0, false);
  }

  /**
   * @param onElements inside a selection or projection, where names are the elements' properties
   */
  private @Nullable ListenerRefusal visit(
      SpelNode node, @Nullable SpelNode parent, int index, boolean onElements) {
    ListenerRefusal refusal = refuse(node, parent, index, onElements);
    if (refusal != null) {
      return refusal;
    }
    boolean childrenOnElements =
        onElements || node instanceof Selection || node instanceof Projection;
    for (int i = 0; i < node.getChildCount(); i++) {
      refusal = visit(node.getChild(i), node, i, childrenOnElements);
      if (refusal != null) {
        return refusal;
      }
    }
    return null;
  }

  private @Nullable ListenerRefusal refuse(
      SpelNode node, @Nullable SpelNode parent, int index, boolean onElements) {
    if (node instanceof VariableReference variable) {
      String name = variable.toStringAST().substring(1);
      return VARIABLES.contains(name) || SPEL_VARIABLES.contains(name)
          ? null
          : unknownVariable(name, node.getStartPosition());
    }
    if (node instanceof FunctionReference function) {
      String call = function.toStringAST();
      return new ListenerRefusal(
          described()
              + " calls the function "
              + call.substring(0, call.indexOf('('))
              + "(...), which is not defined: the expression has only the variables "
              + VARIABLE_LIST,
          "Call a method of a variable (#payload.method()), of a bean (@beanName.method(#payload))"
              + " or a static one (T(com.example.Keys).of(#payload))");
    }
    // SpEL reads a name that starts the expression (or an operand, or a method argument) from the
    // evaluation root, and key expressions have none; a bare name as an index is a map key.
    boolean onRoot =
        !onElements
            && !(parent instanceof Indexer)
            && (!(parent instanceof CompoundExpression) || index == 0);
    if (onRoot && node instanceof PropertyOrFieldReference property) {
      return bareName(property.getName(), node.getStartPosition());
    }
    if (onRoot && node instanceof MethodReference method) {
      return new ListenerRefusal(
          described() + " calls " + method.getName() + "(...) on the evaluation root," + NO_ROOT,
          "Call it on a variable, such as #payload." + method.getName() + "(...)");
    }
    if (onRoot && node instanceof Indexer indexer) {
      String name =
          indexer.getChildCount() == 1
                  && indexer.getChild(0) instanceof StringLiteral literal
                  && literal.getLiteralValue().getValue() instanceof String value
              ? value
              : null;
      return new ListenerRefusal(
          described() + " indexes the evaluation root," + NO_ROOT,
          name == null
              ? "Index a variable, such as #headers['order-no']"
              : capitalized(fromHeader(name)));
    }
    if (node instanceof CompoundExpression compound
        && compound.getChild(0) instanceof VariableReference variable) {
      return propertyChain(compound, variable.toStringAST().substring(1));
    }
    return null;
  }

  private ListenerRefusal unknownVariable(String name, int position) {
    String closest = closest(name, VARIABLES);
    return new ListenerRefusal(
        described()
            + " reads the variable #"
            + name
            + ", which is not defined: the variables are "
            + VARIABLE_LIST,
        closest == null
            ? "Read the record through " + VARIABLE_LIST + ", or a bean as @beanName"
            : "Write "
                + attribute
                + " = \""
                + text.substring(0, position)
                + "#"
                + closest
                + text.substring(position + 1 + name.length())
                + "\"");
  }

  private ListenerRefusal bareName(String name, int position) {
    String problem =
        described() + " reads " + name + " as a property of the evaluation root," + NO_ROOT;
    String withHash = text.substring(0, position) + "#" + text.substring(position);
    if (VARIABLES.contains(name)) {
      return new ListenerRefusal(
          problem, "Write " + attribute + " = \"" + withHash + "\" (variables start with #)");
    }
    Class<?> payloadClass = concrete(payload);
    boolean payloadHasIt = payloadClass != null && READERS.reader(payloadClass, name) != null;
    String onPayload = text.substring(0, position) + "#" + PAYLOAD + "." + text.substring(position);
    if (HEADER_NAME.matcher(text).matches()) {
      problem +=
          text.equals(name) ? "" : " ('" + text + "' is parsed as an expression, not as a name)";
      return new ListenerRefusal(
          problem,
          payloadHasIt
              ? (attribute.equals("key")
                      ? "To take the key from the payload's property, write "
                      : "To read the payload's property, write ")
                  + attribute
                  + " = \""
                  + onPayload
                  + "\"; "
                  + fromHeader(text)
              : capitalized(fromHeader(text)));
    }
    return new ListenerRefusal(
        problem,
        "Read it through a variable: "
            + (payloadHasIt
                ? attribute + " = \"" + onPayload + "\""
                : "#headers['"
                    + name
                    + "'] for a header, #payload."
                    + name
                    + " for a property of the payload"));
  }

  /** The action that takes the key from header {@code name}, as a clause. */
  private String fromHeader(String name) {
    return attribute.equals("key")
        ? "to take the key from the header '"
            + name
            + "', write header = \""
            + name
            + "\" instead (or key = \"#headers['"
            + name
            + "']\")"
        : "to read the header '"
            + name
            + "', write "
            + attribute
            + " = \"#headers['"
            + name
            + "']\"";
  }

  private static String capitalized(String clause) {
    return Character.toUpperCase(clause.charAt(0)) + clause.substring(1);
  }

  /**
   * Follows {@code #payload.customer.id} through the declared types as far as they are concrete
   * classes, refusing a name that none of them can read.
   */
  private @Nullable ListenerRefusal propertyChain(CompoundExpression compound, String variable) {
    ResolvableType type =
        switch (variable) {
          case PAYLOAD -> payload;
          case RECORD -> ResolvableType.forClass(ConsumerRecord.class);
          case TOPIC -> ResolvableType.forClass(String.class);
          default -> ResolvableType.NONE;
        };
    StringBuilder path = new StringBuilder("#").append(variable);
    for (int i = 1; i < compound.getChildCount(); i++) {
      ListenerRefusal jsonField = jsonTreeField(type, compound.getChild(i), path.toString());
      if (jsonField != null) {
        return jsonField;
      }
      Class<?> owner = concrete(type);
      if (!(compound.getChild(i) instanceof PropertyOrFieldReference property) || owner == null) {
        return null;
      }
      String name = property.getName();
      Member reader = READERS.reader(owner, name);
      if (reader == null) {
        // SpEL reads the property of the object it is given: a subtype the payload type declares
        // (Jackson's @JsonSubTypes, a sealed class's permitted ones) is what a record may be.
        List<Class<?>> subtypes = declaredSubtypes(owner);
        if (subtypes.stream().anyMatch(subtype -> READERS.reader(subtype, name) != null)) {
          return null;
        }
        return missingProperty(path.toString(), name, owner, subtypes);
      }
      type = typeOf(reader, type);
      path.append('.').append(name);
    }
    return null;
  }

  /**
   * A field of a JSON tree read as a property ({@code #payload.orderNo} on a {@code JsonNode}):
   * SpEL reads a JsonNode's getters, not its fields, so this failed on every record, each
   * dead-lettered as a malformed key. (A Map's entries are read as properties.)
   */
  private @Nullable ListenerRefusal jsonTreeField(ResolvableType type, SpelNode node, String path) {
    Class<?> tree = type.resolve();
    String treeClass = tree == null ? null : jsonTree(tree);
    if (tree == null
        || treeClass == null
        || !(node instanceof PropertyOrFieldReference property)
        || READERS.reader(tree, property.getName()) != null) {
      return null;
    }
    String name = property.getName();
    // Jackson 3 renamed asText() to asString().
    String asText = treeClass.startsWith("com.fasterxml.") ? "asText()" : "asString()";
    return new ListenerRefusal(
        described()
            + " reads the field "
            + name
            + " of "
            + path
            + ", a "
            + tree.getName()
            + ", as a property: SpEL reads a JSON tree's getters, not its fields, and every record"
            + " would fail",
        "Write " + path + ".get('" + name + "')." + asText);
  }

  /** The name of the JsonNode class {@code type} is or extends, or null. */
  private static @Nullable String jsonTree(Class<?> type) {
    for (Class<?> s = type; s != null; s = s.getSuperclass()) {
      if (s.getName().endsWith(".databind.JsonNode")) {
        return s.getName();
      }
    }
    return null;
  }

  private ListenerRefusal missingProperty(
      String path, String name, Class<?> owner, List<Class<?>> subtypes) {
    String problem =
        described()
            + " reads the property "
            + name
            + " of "
            + path
            + ", "
            + (path.equals("#" + PAYLOAD) ? "the payload, " : "")
            + "a "
            + owner.getName()
            + ", which has no such property (no getter, record component or public field)";
    if (owner == String.class) {
      return new ListenerRefusal(
          problem,
          "Take the payload as a class that has "
              + name
              + " (a parameter of that type, converted from JSON by the listener's message"
              + " converter or deserializer); "
              + fromHeader(name));
    }
    Set<String> readable = new TreeSet<>(properties(owner));
    subtypes.forEach(subtype -> readable.addAll(properties(subtype)));
    List<String> properties = List.copyOf(readable);
    String holders =
        owner.getSimpleName() + (subtypes.isEmpty() ? " has" : " and its declared subtypes have");
    problem +=
        properties.isEmpty()
            ? "; it has no readable properties"
            : "; " + holders + ": " + String.join(", ", properties);
    String closest = closest(name, properties);
    return new ListenerRefusal(
        problem,
        closest != null
            ? "Write " + path + "." + closest + " if that is the property you mean"
            : "Read one of its properties, or a header with #headers['name']");
  }

  private String described() {
    return attribute + " expression '" + text + "'";
  }

  /**
   * The class of {@code type} when it is known at start-up to be what the expression meets at run
   * time; null for Object, an interface or abstract class (a JSON tree), a Map or collection, an
   * array, Optional and a type variable or wildcard.
   */
  private static @Nullable Class<?> concrete(ResolvableType type) {
    if (type == ResolvableType.NONE
        || type.getType() instanceof TypeVariable<?>
        || type.getType() instanceof WildcardType) {
      return null;
    }
    Class<?> resolved = type.resolve();
    if (resolved == null) {
      return null;
    }
    Class<?> c = ClassUtils.resolvePrimitiveIfNecessary(resolved);
    if (c == Object.class
        || c.isArray()
        || Modifier.isAbstract(c.getModifiers())
        || Map.class.isAssignableFrom(c)
        || Iterable.class.isAssignableFrom(c)
        || c == Optional.class) {
      return null;
    }
    return jsonTree(c) != null ? null : c;
  }

  /**
   * The subtypes of {@code type} known at start-up: the permitted subclasses of a sealed class and
   * the classes Jackson's {@code @JsonSubTypes} names (read by name: Jackson is optional), and
   * theirs in turn.
   */
  static List<Class<?>> declaredSubtypes(Class<?> type) {
    Set<Class<?>> found = new LinkedHashSet<>();
    Deque<Class<?>> pending = new ArrayDeque<>(List.of(type));
    while (!pending.isEmpty() && found.size() < MAX_SUBTYPES) {
      Class<?> current = pending.pop();
      List<Class<?>> direct = new ArrayList<>();
      if (current.isSealed()) {
        direct.addAll(Arrays.asList(current.getPermittedSubclasses()));
      }
      for (Annotation annotation : current.getDeclaredAnnotations()) {
        if (annotation.annotationType().getName().equals(JSON_SUB_TYPES)) {
          direct.addAll(jsonSubTypes(annotation));
        }
      }
      for (Class<?> subtype : direct) {
        if (subtype != type && type.isAssignableFrom(subtype) && found.add(subtype)) {
          pending.push(subtype);
        }
      }
    }
    return List.copyOf(found);
  }

  private static List<Class<?>> jsonSubTypes(Annotation subTypes) {
    List<Class<?>> classes = new ArrayList<>();
    try {
      for (Object entry :
          (Object[]) subTypes.annotationType().getMethod("value").invoke(subTypes)) {
        Annotation named = (Annotation) entry;
        if (named.annotationType().getMethod("value").invoke(named) instanceof Class<?> subtype) {
          classes.add(subtype);
        }
      }
    } catch (ReflectiveOperationException | RuntimeException e) {
      // Another library's annotation of that name: no subtypes known from it.
    }
    return classes;
  }

  /** The declared type of what {@code reader} reads from an object of type {@code owner}. */
  private static ResolvableType typeOf(Member reader, ResolvableType owner) {
    Class<?> declaring = reader.getDeclaringClass();
    ResolvableType asDeclared = owner.as(declaring);
    Type generic =
        reader instanceof Method method
            ? method.getGenericReturnType()
            : ((Field) reader).getGenericType();
    if (generic instanceof TypeVariable<?> variable) {
      TypeVariable<?>[] parameters = declaring.getTypeParameters();
      for (int i = 0; i < parameters.length; i++) {
        if (parameters[i].equals(variable)) {
          return asDeclared.getGeneric(i);
        }
      }
      return ResolvableType.NONE;
    }
    return ResolvableType.forType(generic, asDeclared);
  }

  /**
   * The names SpEL can read from a {@code type}, as a user would list them: bean properties, record
   * components, public fields; for a class with none of those (ConsumerRecord), its plain
   * accessors.
   */
  static List<String> properties(Class<?> type) {
    Set<String> names = new TreeSet<>();
    for (PropertyDescriptor descriptor : BeanUtils.getPropertyDescriptors(type)) {
      if (descriptor.getReadMethod() != null && !descriptor.getName().equals("class")) {
        names.add(descriptor.getName());
      }
    }
    if (type.isRecord()) {
      for (RecordComponent component : type.getRecordComponents()) {
        names.add(component.getName());
      }
    }
    for (Field field : type.getFields()) {
      if (!Modifier.isStatic(field.getModifiers())) {
        names.add(field.getName());
      }
    }
    if (names.isEmpty()) {
      for (Method method : type.getMethods()) {
        if (method.getParameterCount() == 0
            && method.getReturnType() != void.class
            && !Modifier.isStatic(method.getModifiers())
            && !Set.of("hashCode", "toString", "getClass").contains(method.getName())) {
          names.add(method.getName());
        }
      }
    }
    return List.copyOf(names);
  }

  /** The candidate nearest to {@code name} if it is near enough to be a typo of it. */
  private static @Nullable String closest(String name, List<String> candidates) {
    String lower = name.toLowerCase(Locale.ROOT);
    return candidates.stream()
        .filter(
            c ->
                EditDistance.between(lower, c.toLowerCase(Locale.ROOT))
                    <= Math.max(2, name.length() / 4))
        .min(Comparator.comparingInt(c -> EditDistance.between(lower, c.toLowerCase(Locale.ROOT))))
        .orElse(null);
  }

  /** SpEL's own lookup of a readable property: the check agrees with what evaluation will do. */
  private static final class Readers extends ReflectivePropertyAccessor {
    @Nullable Member reader(Class<?> type, String name) {
      Method getter = findGetterForProperty(name, type, false);
      return getter != null ? getter : findField(name, type, false);
    }
  }
}
