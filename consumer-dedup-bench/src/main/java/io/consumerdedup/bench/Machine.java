package io.consumerdedup.bench;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;

/**
 * The machine the benchmark runs on, as far as the JVM and Linux's {@code /proc} tell: cores, CPU
 * model, memory, and the load average when the benchmark started (other work on the machine changes
 * the numbers).
 *
 * @param cores processors available to the JVM
 * @param cpuModel the CPU's model name, or "unknown"
 * @param memory total memory, such as {@code 23.4 GiB}, or "unknown"
 * @param system the operating system and its version
 * @param java the Java runtime's vendor and version
 * @param loadAverage the 1, 5 and 15 minute load averages, or "unknown"
 */
record Machine(
    int cores, String cpuModel, String memory, String system, String java, String loadAverage) {
  private static final String UNKNOWN = "unknown";

  static Machine describe() {
    return new Machine(
        Runtime.getRuntime().availableProcessors(),
        readCpuModel(),
        readMemory(),
        System.getProperty("os.name") + " " + System.getProperty("os.version"),
        System.getProperty("java.vm.name") + " " + System.getProperty("java.runtime.version"),
        readLoadAverage());
  }

  private static String readCpuModel() {
    return lines("/proc/cpuinfo").stream()
        .filter(line -> line.startsWith("model name"))
        .map(line -> line.substring(line.indexOf(':') + 1).trim())
        .findFirst()
        .orElse(UNKNOWN);
  }

  private static String readMemory() {
    return lines("/proc/meminfo").stream()
        .filter(line -> line.startsWith("MemTotal:"))
        .map(line -> line.replaceAll("\\D", ""))
        .map(kib -> String.format(Locale.ROOT, "%.1f GiB", Long.parseLong(kib) / 1024.0 / 1024.0))
        .findFirst()
        .orElse(UNKNOWN);
  }

  private static String readLoadAverage() {
    return lines("/proc/loadavg").stream()
        .map(line -> String.join(" ", List.of(line.split(" ")).subList(0, 3)))
        .findFirst()
        .orElse(UNKNOWN);
  }

  private static List<String> lines(String file) {
    try {
      return Files.readAllLines(Path.of(file));
    } catch (IOException | RuntimeException e) {
      return List.of();
    }
  }
}
