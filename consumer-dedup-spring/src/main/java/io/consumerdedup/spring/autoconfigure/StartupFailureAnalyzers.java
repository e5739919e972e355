package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupTableMissingException;
import io.consumerdedup.spring.InvalidIdempotentListenerException;
import org.jspecify.annotations.Nullable;
import org.springframework.boot.context.properties.source.ConfigurationProperty;
import org.springframework.boot.context.properties.source.ConfigurationPropertyName;
import org.springframework.boot.context.properties.source.ConfigurationPropertySource;
import org.springframework.boot.context.properties.source.ConfigurationPropertySources;
import org.springframework.boot.diagnostics.AbstractFailureAnalyzer;
import org.springframework.boot.diagnostics.FailureAnalysis;
import org.springframework.core.env.ConfigurableEnvironment;
import org.springframework.core.env.Environment;

/**
 * Spring Boot failure analyzers (registered in {@code META-INF/spring.factories}) for the start-up
 * errors of consumer-dedup: Boot then prints its "APPLICATION FAILED TO START" report with
 * consumer-dedup's sentence as the description and what to do as the action, instead of a {@code
 * BeanCreationException} stack trace with the sentence deep inside.
 */
final class StartupFailureAnalyzers {
  private StartupFailureAnalyzers() {}

  /** A {@code consumer-dedup.*} property with a value that is not allowed. */
  static final class InvalidProperty
      extends AbstractFailureAnalyzer<InvalidDedupPropertyException> {
    private final @Nullable ConfigurableEnvironment environment;

    InvalidProperty(Environment environment) {
      this.environment =
          environment instanceof ConfigurableEnvironment configurable ? configurable : null;
    }

    @Override
    protected FailureAnalysis analyze(Throwable root, InvalidDedupPropertyException cause) {
      String origin = origin(cause.property());
      return new FailureAnalysis(
          cause.getMessage() + (origin == null ? "" : " (set in " + origin + ")"),
          "Set "
              + cause.property()
              + " to "
              + cause.allowed()
              + ", or remove it to use the default.",
          cause);
    }

    /** Where the property is set: a file and line, or the property source's name. */
    private @Nullable String origin(String name) {
      if (environment == null) {
        return null;
      }
      ConfigurationPropertyName key = ConfigurationPropertyName.of(name);
      for (ConfigurationPropertySource source : ConfigurationPropertySources.get(environment)) {
        ConfigurationProperty property = source.getConfigurationProperty(key);
        if (property != null) {
          return property.getOrigin() == null ? null : property.getOrigin().toString();
        }
      }
      return null;
    }
  }

  /** An {@code @Idempotent} listener that cannot work as written. */
  static final class InvalidListener
      extends AbstractFailureAnalyzer<InvalidIdempotentListenerException> {
    @Override
    protected FailureAnalysis analyze(Throwable root, InvalidIdempotentListenerException cause) {
      return new FailureAnalysis(cause.description() + ".", cause.action() + ".", cause);
    }
  }

  /** Listeners of different consumer groups share a biz type. */
  static final class SharedBizType extends AbstractFailureAnalyzer<SharedBizTypeException> {
    @Override
    protected FailureAnalysis analyze(Throwable root, SharedBizTypeException cause) {
      return new FailureAnalysis(cause.problem() + ".", cause.action() + ".", cause);
    }
  }

  /** An {@code @Idempotent} listener in a share-group container. */
  static final class UnsupportedShareListener
      extends AbstractFailureAnalyzer<UnsupportedShareListenerException> {
    @Override
    protected FailureAnalysis analyze(Throwable root, UnsupportedShareListenerException cause) {
      return new FailureAnalysis(cause.problem() + ".", cause.action() + ".", cause);
    }
  }

  /**
   * Any other refusal of the configuration at start-up (a database the store does not support, mode
   * TRANSACTIONAL behind a pooler without {@code prepareThreshold=0}): its message says what is
   * wrong and what to do in one sentence, so it is the description, with no separate action.
   * Registered after the analyzers of its subclasses, which split the two.
   */
  static final class Configuration extends AbstractFailureAnalyzer<DedupConfigurationException> {
    @Override
    protected FailureAnalysis analyze(Throwable root, DedupConfigurationException cause) {
      String message = String.valueOf(cause.getMessage());
      return new FailureAnalysis(message.endsWith(".") ? message : message + ".", null, cause);
    }
  }

  /** The dedup table, or some of its columns, is missing. */
  static final class TableMissing extends AbstractFailureAnalyzer<DedupTableMissingException> {
    @Override
    protected FailureAnalysis analyze(Throwable root, DedupTableMissingException cause) {
      return new FailureAnalysis(cause.problem() + ".", cause.fix() + ".", cause);
    }
  }
}
