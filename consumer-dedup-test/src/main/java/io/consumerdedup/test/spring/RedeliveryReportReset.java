package io.consumerdedup.test.spring;

import io.consumerdedup.test.RedeliveryReport;
import org.springframework.test.context.TestContext;
import org.springframework.test.context.TestContextAnnotationUtils;
import org.springframework.test.context.support.AbstractTestExecutionListener;

/**
 * Resets the {@link RedeliveryReport} bean before each test method of a class with {@link
 * RedeliverEachRecord} (before its {@code @BeforeEach} methods). Spring keeps one application
 * context, and so one report, for every test of a class (and for classes of the same
 * configuration): a test that waits until {@code redeliveredCopies()} reaches its own count would
 * otherwise find it reached by an earlier test's copies, and assert before its own records ran.
 * Registered in {@code META-INF/spring.factories}, among Spring's default listeners.
 */
public class RedeliveryReportReset extends AbstractTestExecutionListener {

  @Override
  public void beforeTestMethod(TestContext testContext) {
    if (!TestContextAnnotationUtils.hasAnnotation(
        testContext.getTestClass(), RedeliverEachRecord.class)) {
      return;
    }
    testContext
        .getApplicationContext()
        .getBeanProvider(RedeliveryReport.class)
        .ifUnique(RedeliveryReport::reset);
  }
}
