package io.consumerdedup.test.spring;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Inherited;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import org.springframework.context.annotation.Import;

/**
 * On a Spring Boot test class: every record reaches each {@code @Idempotent} listener twice, the
 * second copy after the first completed (its outcome written, its transaction committed), as Kafka
 * delivers a record again after a rebalance, a crash or a lost offset commit. The {@link
 * io.consumerdedup.test.RedeliveryReport} bean names each listener whose body ran twice for one
 * record: its dedup key does not identify the record's business action.
 *
 * <pre>{@code
 * @SpringBootTest
 * @EmbeddedKafka(topics = "payments")
 * @RedeliverEachRecord
 * class PaymentsRedeliveryTest {
 *   @Autowired RedeliveryReport redelivery;
 *
 *   @Test
 *   void eachPaymentIsChargedOnceThoughEveryRecordArrivesTwice() {
 *     ... // send records, wait until they are processed
 *     redelivery.assertNoBodyRanTwice();
 *   }
 * }
 * }</pre>
 *
 * <p>The copy is the same record: the listener is invoked again with the same arguments, its {@code
 * ConsumerRecord}s, byte arrays and messages of bytes (a batch's too) as new objects with the
 * content they had before the first call (a listener that wipes or decodes its bytes in place does
 * not hand the change to its copy); other payload objects are the first call's own. Body runs are
 * counted per record (topic, partition, offset) from the listener's {@code ConsumerRecord} argument
 * or the record the container is delivering; batch listeners are counted when they take the records
 * ({@code List<ConsumerRecord>} or {@code ConsumerRecords}), not a list of payloads. Listeners
 * whose container runs them in a transaction (Kafka's, or a database transaction manager set on the
 * container) have their outcome written only after the container is done with the record, so their
 * copy finds the key still in progress: they are not supported, and the copy's failure says so. A
 * copy that throws is listed in {@link io.consumerdedup.test.RedeliveryReport#failedRedeliveries()}
 * and fails the assertion. The report is reset before each test method (before its
 * {@code @BeforeEach} methods): a test counts only the records delivered during it, not those of an
 * earlier test of the same application context.
 */
@Target(ElementType.TYPE)
@Retention(RetentionPolicy.RUNTIME)
@Documented
@Inherited
@Import(RedeliveryConfiguration.class)
public @interface RedeliverEachRecord {}
