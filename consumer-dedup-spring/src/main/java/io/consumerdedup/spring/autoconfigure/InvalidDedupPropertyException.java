package io.consumerdedup.spring.autoconfigure;

/**
 * A {@code consumer-dedup.*} property whose value is not allowed, alone or with the others: the
 * application stops naming the property, its value and what it must be.
 */
public final class InvalidDedupPropertyException extends IllegalArgumentException {
  private static final long serialVersionUID = 1L;

  private final String property;
  private final String value;
  private final String allowed;

  InvalidDedupPropertyException(String property, Object value, String allowed) {
    super(property + "=" + value + " is not allowed: it must be " + allowed);
    this.property = property;
    this.value = String.valueOf(value);
    this.allowed = allowed;
  }

  /** The property's full name, such as {@code consumer-dedup.lease}. */
  public String property() {
    return property;
  }

  /** The value, as the message shows it. */
  public String value() {
    return value;
  }

  /** What the value must be, such as {@code at least 1s}. */
  public String allowed() {
    return allowed;
  }
}
