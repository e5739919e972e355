package io.consumerdedup.core.internal;

import java.net.InetAddress;
import java.security.SecureRandom;
import java.util.HexFormat;

/** Default owner ids: host, pid and a short random part, so two executors in one JVM differ too. */
public final class OwnerIds {
  private static final SecureRandom RANDOM = new SecureRandom();
  private static final int MAX_HOST_LENGTH = 80;

  /** What an owner id may be: the owner column is varchar(128), and a NUL is no text at all. */
  public static final String ALLOWED = "1 to 128 characters, not blank, with no control characters";

  private OwnerIds() {}

  /**
   * @throws IllegalArgumentException if {@code ownerId} is not {@link #ALLOWED}, showing it with
   *     its control characters escaped
   */
  public static String check(String ownerId) {
    if (ownerId.isBlank()
        || ownerId.length() > 128
        || ownerId.chars().anyMatch(Character::isISOControl)) {
      throw new IllegalArgumentException(
          "ownerId must be " + ALLOWED + ", was '" + printable(ownerId) + "'");
    }
    return ownerId;
  }

  /** {@code ownerId} with its control characters written as escapes, for a message or a log. */
  public static String printable(String ownerId) {
    StringBuilder printable = new StringBuilder(ownerId.length());
    ownerId
        .chars()
        .forEach(
            c -> {
              switch (c) {
                case '\n' -> printable.append("\\n");
                case '\r' -> printable.append("\\r");
                case '\t' -> printable.append("\\t");
                case 0 -> printable.append("\\0");
                default -> {
                  if (Character.isISOControl(c)) {
                    printable.append(String.format("\\u%04X", c));
                  } else {
                    printable.append((char) c);
                  }
                }
              }
            });
    return printable.toString();
  }

  public static String generate() {
    byte[] random = new byte[3];
    RANDOM.nextBytes(random);
    String host = hostName();
    if (host.length() > MAX_HOST_LENGTH) {
      host = host.substring(0, MAX_HOST_LENGTH);
    }
    return host + "-" + ProcessHandle.current().pid() + "-" + HexFormat.of().formatHex(random);
  }

  private static String hostName() {
    String fromEnvironment = System.getenv("HOSTNAME");
    if (fromEnvironment != null && !fromEnvironment.isBlank()) {
      return fromEnvironment.strip();
    }
    try {
      return InetAddress.getLocalHost().getHostName();
    } catch (Exception e) {
      return "unknown-host";
    }
  }
}
