package io.consumerdedup.spring.autoconfigure;

import java.util.List;
import java.util.Locale;
import org.jspecify.annotations.Nullable;
import org.springframework.boot.autoconfigure.condition.ConditionOutcome;
import org.springframework.boot.autoconfigure.condition.SpringBootCondition;
import org.springframework.context.annotation.ConditionContext;
import org.springframework.core.env.PropertyResolver;
import org.springframework.core.type.AnnotatedTypeMetadata;

/**
 * The properties that switch consumer-dedup's beans on and off, read as their bound values are:
 * trimmed, ignoring case. Boot's property conditions compare the raw text with "true", so {@code
 * consumer-dedup.enabled=on} (or {@code true } with a trailing space) turned every consumer-dedup
 * auto-configuration off, the checks that refuse a bad setup with them, and {@code @Idempotent} did
 * nothing; {@code cleanup.enabled=on} bound true but made no janitor. A value the binder would not
 * read as a boolean counts as on here, so that the configuration loads and {@link #check} refuses
 * it.
 */
final class DedupSwitches {
  static final String ENABLED = "consumer-dedup.enabled";
  static final String CLEANUP_ENABLED = "consumer-dedup.cleanup.enabled";
  static final String INITIALIZE_SCHEMA = "consumer-dedup.initialize-schema";

  private DedupSwitches() {}

  /** Refuses an on/off property that Boot's binder would not bind as a boolean. */
  static void check(PropertyResolver environment) {
    for (String name : List.of(ENABLED, CLEANUP_ENABLED)) {
      String value = environment.getProperty(name);
      if (value != null && !value.isBlank() && parsed(value) == null) {
        throw new InvalidDedupPropertyException(
            name, "'" + value + "'", "true or false (or on/off, yes/no, 1/0)");
      }
    }
  }

  /**
   * The value as Boot's binder reads a boolean (trimmed, any case: true, on, yes, 1 and false, off,
   * no, 0), so that the switch and the bound property agree; null for anything else, blank
   * included.
   */
  private static @Nullable Boolean parsed(String value) {
    return switch (value.trim().toLowerCase(Locale.ROOT)) {
      case "true", "on", "yes", "1" -> true;
      case "false", "off", "no", "0" -> false;
      default -> null;
    };
  }

  /**
   * Off only when set to a false value; missing, on; blank or not a boolean, on, so that the
   * configuration loads and the binder (blank) or {@link #check} refuses it, naming it.
   */
  private static boolean on(PropertyResolver environment, String name) {
    String value = environment.getProperty(name);
    return value == null || !Boolean.FALSE.equals(parsed(value));
  }

  private abstract static class Switch extends SpringBootCondition {
    private final String name;

    Switch(String name) {
      this.name = name;
    }

    @Override
    public ConditionOutcome getMatchOutcome(
        ConditionContext context, AnnotatedTypeMetadata metadata) {
      return on(context.getEnvironment(), name)
          ? ConditionOutcome.match(name + " is not false")
          : ConditionOutcome.noMatch(name + " is false");
    }
  }

  /** {@code consumer-dedup.enabled} is not false. */
  static final class Enabled extends Switch {
    Enabled() {
      super(ENABLED);
    }
  }

  /** {@code consumer-dedup.cleanup.enabled} is not false. */
  static final class CleanupEnabled extends Switch {
    CleanupEnabled() {
      super(CLEANUP_ENABLED);
    }
  }

  /**
   * {@code consumer-dedup.initialize-schema} is always, as the enum binds it (trimmed, any case).
   */
  static final class InitializeSchemaAlways extends SpringBootCondition {
    @Override
    public ConditionOutcome getMatchOutcome(
        ConditionContext context, AnnotatedTypeMetadata metadata) {
      String value = context.getEnvironment().getProperty(INITIALIZE_SCHEMA);
      return value != null && value.trim().toLowerCase(Locale.ROOT).equals("always")
          ? ConditionOutcome.match(INITIALIZE_SCHEMA + " is always")
          : ConditionOutcome.noMatch(INITIALIZE_SCHEMA + " is not always");
    }
  }
}
