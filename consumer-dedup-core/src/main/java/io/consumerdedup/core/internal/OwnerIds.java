package io.consumerdedup.core.internal;

import java.net.InetAddress;
import java.security.SecureRandom;
import java.util.HexFormat;

/** Default owner ids: host, pid and a short random part, so two executors in one JVM differ too. */
public final class OwnerIds {
  private static final SecureRandom RANDOM = new SecureRandom();
  private static final int MAX_HOST_LENGTH = 80;

  private OwnerIds() {}

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
