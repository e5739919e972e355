package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.spring.internal.EditDistance;
import java.beans.PropertyDescriptor;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.jspecify.annotations.Nullable;
import org.springframework.beans.BeanUtils;
import org.springframework.boot.context.properties.bind.DataObjectPropertyName;
import org.springframework.boot.context.properties.source.ConfigurationProperty;
import org.springframework.boot.context.properties.source.ConfigurationPropertyName;
import org.springframework.boot.context.properties.source.ConfigurationPropertyName.Form;
import org.springframework.boot.context.properties.source.ConfigurationPropertySource;
import org.springframework.boot.context.properties.source.ConfigurationPropertySources;
import org.springframework.boot.context.properties.source.IterableConfigurationPropertySource;
import org.springframework.core.env.Environment;
import org.springframework.core.env.SystemEnvironmentPropertySource;

/**
 * Refuses a {@code consumer-dedup.*} name that no property has. Spring Boot ignores it, so a name
 * spelt otherwise ({@code consumer-dedup.dedup-mode=TRANSACTIONAL}, {@code
 * consumer-dedup.initialise-schema=always}) left the default in force without a word: mode
 * SEPARATE's crash window where the application meant TRANSACTIONAL, ten attempts where it meant
 * three. Environment variables are not read here: their names cannot be told from another
 * application's (a Kubernetes service's {@code CONSUMER_DEDUP_PORT}).
 */
final class UnknownDedupProperties {

  private static final ConfigurationPropertyName PREFIX =
      ConfigurationPropertyName.of("consumer-dedup");

  private UnknownDedupProperties() {}

  /**
   * @throws DedupConfigurationException naming the first unknown property, its value, where it is
   *     set, and the property of the closest name
   */
  static void check(Environment environment) {
    // By group ("" for the top level), the dashed names of its properties.
    Map<String, Set<String>> known = new LinkedHashMap<>();
    known.put("", names(ConsumerDedupProperties.class));
    for (PropertyDescriptor group :
        BeanUtils.getPropertyDescriptors(ConsumerDedupProperties.class)) {
      if (group.getWriteMethod() == null
          && group.getPropertyType().getDeclaringClass() == ConsumerDedupProperties.class) {
        known.put(
            DataObjectPropertyName.toDashedForm(group.getName()), names(group.getPropertyType()));
      }
    }
    for (ConfigurationPropertySource source : ConfigurationPropertySources.get(environment)) {
      if (source instanceof IterableConfigurationPropertySource names
          && !(source.getUnderlyingSource() instanceof SystemEnvironmentPropertySource)) {
        names
            .filter(PREFIX::isAncestorOf)
            .forEach(name -> refuseUnknown(name, source.getConfigurationProperty(name), known));
      }
    }
  }

  private static void refuseUnknown(
      ConfigurationPropertyName name,
      @Nullable ConfigurationProperty property,
      Map<String, Set<String>> known) {
    String first = name.getElement(1, Form.UNIFORM);
    String group = find(known.keySet(), first);
    if (group != null) {
      if (name.getNumberOfElements() < 3
          || name.isNumericIndex(2)
          || find(known.getOrDefault(group, Set.of()), name.getElement(2, Form.UNIFORM)) != null) {
        return;
      }
    } else if (find(known.getOrDefault("", Set.of()), first) != null) {
      return;
    }
    String written = name.toString();
    String origin =
        property == null || property.getOrigin() == null ? "" : " in " + property.getOrigin();
    throw new DedupConfigurationException(
        written
            + (property == null ? "" : "=" + property.getValue())
            + origin
            + " is not a consumer-dedup property: Spring Boot would ignore it and leave the default"
            + " in force"
            + closest(written, known)
            + " (docs/configuration.md lists the properties)",
        null,
        null);
  }

  /** The name among {@code dashed} whose uniform form is {@code uniform}, or null. */
  private static @Nullable String find(Set<String> dashed, String uniform) {
    for (String name : dashed) {
      if (!name.isEmpty() && uniform(name).equals(uniform)) {
        return name;
      }
    }
    return null;
  }

  private static String closest(String written, Map<String, Set<String>> known) {
    Set<String> all = new TreeSet<>();
    known.forEach(
        (group, names) ->
            names.forEach(
                name -> all.add("consumer-dedup." + (group.isEmpty() ? "" : group + ".") + name)));
    String target = uniform(written);
    return all.stream()
        .min(Comparator.comparingInt(candidate -> EditDistance.between(target, uniform(candidate))))
        .filter(candidate -> EditDistance.between(target, uniform(candidate)) <= 6)
        .map(candidate -> ". Did you mean " + candidate + "?")
        .orElse("");
  }

  /** The dashed names of {@code type}'s properties. */
  private static Set<String> names(Class<?> type) {
    Set<String> names = new TreeSet<>();
    for (PropertyDescriptor property : BeanUtils.getPropertyDescriptors(type)) {
      if (!property.getName().equals("class")) {
        names.add(DataObjectPropertyName.toDashedForm(property.getName()));
      }
    }
    return names;
  }

  /** A name as relaxed binding compares it: lower case, without dashes. */
  private static String uniform(String name) {
    return name.replace("-", "").replace("_", "").toLowerCase(Locale.ROOT);
  }
}
