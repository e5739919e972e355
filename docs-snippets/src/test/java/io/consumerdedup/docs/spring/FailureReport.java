package io.consumerdedup.docs.spring;

/** What Spring Boot prints for a start-up refusal, as a user reads it in the application's log. */
final class FailureReport {
  private FailureReport() {}

  /** The report's heading and the start of its description. */
  static String describing(String description) {
    String n = System.lineSeparator();
    return "APPLICATION FAILED TO START"
        + n
        + "***************************"
        + n
        + n
        + "Description:"
        + n
        + n
        + description;
  }
}
