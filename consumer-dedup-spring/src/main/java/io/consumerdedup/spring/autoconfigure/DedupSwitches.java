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
 * nothing; {@code cleanup.enabled=on} bound true but made no janitor. A value that is neither true
 * nor false counts as on here, so that the configuration loads and {@link #check} refuses it.
 */
final class DedupSwitches {
  static final String ENABLED = "consumer-dedup.enabled";
  static final String CLEANUP_ENABLED = "consumer-dedup.cleanup.enabled";
  static final String INITIALIZE_SCHEMA = "consumer-dedup.initialize-schema";

  private DedupSwitches() {}

  /** Refuses an on/off property that is neither true nor false. */
  static void check(PropertyResolver environment) {
    for (String name : List.of(ENABLED, CLEANUP_ENABLED)) {
      String value = environment.getProperty(name);
      if (value != null && parsed(value) == null) {
        throw new InvalidDedupPropertyException(name, "'" + value + "'", "true or false");
      }
    }
  }

  private static @Nullable Boolean parsed(String value) {
    String trimmed = value.trim();
    if (trimmed.equalsIgnoreCase("true")) {
      return true;
    }
    return trimmed.equalsIgnoreCase("false") ? false : null;
  }

  /** Off only when set to false; missing or not a boolean (refused by {@link #check}), on. */
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
