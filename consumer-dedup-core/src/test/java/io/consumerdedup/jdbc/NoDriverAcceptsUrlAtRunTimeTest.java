package io.consumerdedup.jdbc;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.consumerdedup.core.DedupConfigurationException;
import io.consumerdedup.core.DedupException;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupStoreUnavailableException;
import io.consumerdedup.core.Disposition;
import io.consumerdedup.core.IdempotentExecutor;
import io.consumerdedup.testing.ConnectionSource;
import io.consumerdedup.testing.StoreFixture;
import io.consumerdedup.testing.TestDatabase;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.assertj.core.api.SoftAssertions;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.LoggerFactory;

/**
 * A DataSource that asks {@link DriverManager} for each connection (Spring's {@code
 * DriverManagerDataSource}, a tenant's DataSource made when the tenant is first seen) is given a
 * URL no driver accepts after the executor was built: refused at once and the same way at every
 * try. Taken for an outage, each claim was tried for the whole retry budget, every try logged at
 * WARN with the URL and its password, and the record waited with nothing naming the mistake.
 */
class NoDriverAcceptsUrlAtRunTimeTest {
  @RegisterExtension static final StoreFixture fixture = new StoreFixture("nodriver_runtime", 1);

  private final Logger storeLog = (Logger) LoggerFactory.getLogger("io.consumerdedup");
  private final ListAppender<ILoggingEvent> logged = new ListAppender<>();

  @AfterEach
  void detach() {
    storeLog.detachAppender(logged);
  }

  /**
   * MySQL's and MariaDB's drivers take the password in the URL's authority too ({@code
   * jdbc:mysql://app:secret@host/db}); the refusal masked only a {@code password=} parameter, and
   * the build's exception, which applications log, carried the password.
   */
  @Test
  void aPasswordBeforeTheHostIsMaskedToo() {
    ConnectionSource driverManager =
        new ConnectionSource() {
          @Override
          public Connection getConnection() throws SQLException {
            return DriverManager.getConnection("jdbc:mysq://app:hunter2@127.0.0.1:3306/test");
          }
        };
    JdbcDedupStore store = JdbcDedupStore.builder(driverManager).build();

    Throwable thrown = catchThrowable(() -> IdempotentExecutor.builder(store).build().close());

    assertThat(thrown)
        .as("what building threw")
        .isInstanceOf(DedupConfigurationException.class)
        .hasMessageContaining("No JDBC driver accepts the URL of the dedup table's DataSource")
        .hasMessageContaining("DataSource, jdbc:mysq:// (the rest of it is not shown")
        .hasMessageNotContaining("hunter2");
  }

  /**
   * A password before the host holding an '@' or a '/' (written as typed, not percent-encoded): the
   * mask stopped at that character, and the rest of the password was in the message.
   */
  @Test
  void aPasswordBeforeTheHostHoldingAnAtSignOrASlashIsMaskedWhole() {
    for (String password : List.of("hun@ter2", "hun/ter2")) {
      ConnectionSource driverManager =
          new ConnectionSource() {
            @Override
            public Connection getConnection() throws SQLException {
              return DriverManager.getConnection(
                  "jdbc:mysq://app:" + password + "@127.0.0.1:3306/test?user=app");
            }
          };
      JdbcDedupStore store = JdbcDedupStore.builder(driverManager).build();

      Throwable thrown = catchThrowable(() -> IdempotentExecutor.builder(store).build().close());

      assertThat(thrown)
          .as("what building threw, the password " + password)
          .isInstanceOf(DedupConfigurationException.class)
          .hasMessageContaining("DataSource, jdbc:mysq:// (the rest of it is not shown")
          .hasMessageNotContaining("ter2");
    }
  }

  /**
   * A password as typed holding a character that ended the URL in the message (',', ';', '(', ')',
   * whitespace), a '?' or '#' before the host, or an Oracle-style {@code user/password@host}: part
   * or all of the password was in the build's exception, which applications log.
   */
  @Test
  void aPasswordOfAnyFormIsMaskedWhole() {
    List<List<String>> forms =
        List.of(
            List.of("jdbc:mysq://app:hun,ter2@127.0.0.1:3306/test", "jdbc:mysq:// ("),
            List.of("jdbc:mysq://app:hun;ter2@127.0.0.1:3306/test", "jdbc:mysq:// ("),
            List.of("jdbc:mysq://app:hun(ter2)@127.0.0.1:3306/test", "jdbc:mysq:// ("),
            List.of("jdbc:mysq://app:hun ter2@127.0.0.1:3306/test", "jdbc:mysq:// ("),
            List.of("jdbc:mysq://app:hun\tter2@127.0.0.1:3306/test", "jdbc:mysq:// ("),
            List.of("jdbc:mysq://app:hun?ter2@127.0.0.1:3306/test", "jdbc:mysq:// ("),
            List.of("jdbc:mysq://app:hun#ter2@127.0.0.1:3306/test", "jdbc:mysq:// ("),
            List.of("jdbc:postgres://h/test?user=app&password=hun ter2", "jdbc:postgres://h ("),
            List.of("jdbc:postgres://h/test?user=app&password=hun,ter2", "jdbc:postgres://h ("),
            List.of("jdbc:postgres://h/test?user=app&password=hun(ter2)", "jdbc:postgres://h ("),
            List.of("jdbc:postgres://h:5432/test?user=app&password=hun@ter2", "jdbc:postgres:// ("),
            List.of("jdbc:mysq://127.0.0.1:3306/test?password=hun@ter2&user=app", "jdbc:mysq:// ("),
            List.of("jdbc:oracle:thin:app/hunter2@127.0.0.1:1521/orcl", "jdbc:oracle: ("),
            List.of("jdbc:oracle:thin:app/hun@ter2@//127.0.0.1:1521/orcl", "jdbc:oracle: ("));
    SoftAssertions softly = new SoftAssertions();
    for (List<String> form : forms) {
      JdbcDedupStore store =
          JdbcDedupStore.builder(ConnectionSource.driverManager(form.get(0))).build();

      Throwable thrown = catchThrowable(() -> IdempotentExecutor.builder(store).build().close());

      softly
          .assertThat(thrown)
          .as("what building threw for " + form.get(0))
          .isInstanceOf(DedupConfigurationException.class)
          .hasMessageContaining("No JDBC driver accepts the URL of the dedup table's DataSource")
          .hasMessageContaining(form.get(1))
          .hasMessageNotContaining("hun")
          .hasMessageNotContaining("ter2");
    }
    softly.assertAll();
  }

  /**
   * Masking the password by pattern left a form out at each round: a user name holding a raw '@', a
   * {@code password=} value holding '&', a {@code pwd=} parameter, MySQL's {@code (host=..,
   * password=..)} address, an encoded '@'. The message shows the URL's scheme, which its advice is
   * about, and its host and port only where no '@' could make a password of them.
   */
  @Test
  void aRefusedUrlIsShownOnlyByWhatCannotHoldAPassword() {
    List<List<String>> forms =
        List.of(
            List.of("jdbc:mysq://us@er:hunter2@127.0.0.1:3306/test", "jdbc:mysq://"),
            List.of(
                "jdbc:mysq://127.0.0.1:3306/test?password=hun&ter2&user=app",
                "jdbc:mysq://127.0.0.1:3306"),
            List.of(
                "jdbc:postgres://127.0.0.1:5432/test?password=hun;ter2&user=app",
                "jdbc:postgres://127.0.0.1:5432"),
            List.of(
                "jdbc:mysq://127.0.0.1:3306/test?user=app&pwd=hunter2",
                "jdbc:mysq://127.0.0.1:3306"),
            List.of(
                "jdbc:postgres://127.0.0.1:5432/test?sslmode=verify-full&sslkey=k.pk8"
                    + "&sslpassword=hunter2",
                "jdbc:postgres://127.0.0.1:5432"),
            List.of("jdbc:mysq://(host=127.0.0.1,password=hun)ter2)/test", "jdbc:mysq://"),
            List.of("jdbc:mysq://app:hun%40ter2@127.0.0.1:3306/test", "jdbc:mysq://"),
            List.of("jdbc:mysq://app%3Ahunter2@127.0.0.1:3306/test", "jdbc:mysq://"),
            List.of("jdbc:oracle:thin:app/hunter2@127.0.0.1:1521/orcl", "jdbc:oracle:"));
    SoftAssertions softly = new SoftAssertions();
    for (List<String> form : forms) {
      JdbcDedupStore store =
          JdbcDedupStore.builder(ConnectionSource.driverManager(form.get(0))).build();

      Throwable thrown = catchThrowable(() -> IdempotentExecutor.builder(store).build().close());

      softly
          .assertThat(thrown)
          .as("what building threw for " + form.get(0))
          .isInstanceOf(DedupConfigurationException.class)
          .hasMessageContaining(
              "No JDBC driver accepts the URL of the dedup table's DataSource, " + form.get(1))
          .hasMessageContaining("not shown")
          .hasMessageNotContaining("hun")
          .hasMessageNotContaining("ter2");
    }
    softly.assertAll();
  }

  /**
   * A {@code jdbc:postgresql:} URL that PostgreSQL's driver takes for its own but cannot read: a
   * password holding a bare '%' (not percent-encoded), a port out of range, or a user name and
   * password before the host, which it takes for part of the host name. The driver answers with the
   * whole URL in its message ("Unable to parse URL ...") or with the host name it could not look up
   * as its cause; taken for an outage, the build logged that at WARN, password included, and each
   * claim repeated it.
   */
  @Test
  void aPostgresUrlItsDriverCannotReadIsNamedWithoutItsPassword() {
    List<List<String>> forms =
        List.of(
            List.of(TestDatabase.baseUrl() + "&password=50%off", "50%off"),
            List.of("jdbc:postgresql://127.0.0.1:99999/test?user=app&password=hunter2", "hunter2"),
            List.of("jdbc:postgresql://127.0.0.1:54x/test?user=app&password=hunter2", "hunter2"),
            List.of("jdbc:postgresql://app:hunter2@127.0.0.1:5432/test", "hunter2"));
    logged.start();
    storeLog.addAppender(logged);
    SoftAssertions softly = new SoftAssertions();
    for (List<String> form : forms) {
      JdbcDedupStore store =
          JdbcDedupStore.builder(ConnectionSource.driverManager(form.get(0))).build();

      Throwable thrown = catchThrowable(() -> IdempotentExecutor.builder(store).build().close());

      softly
          .assertThat(thrown)
          .as("what building threw for " + form.get(0))
          .isInstanceOf(DedupConfigurationException.class)
          .hasMessageContaining("No JDBC driver accepts the URL of the dedup table's DataSource");
      if (thrown != null) {
        StringWriter printed = new StringWriter();
        thrown.printStackTrace(new PrintWriter(printed));
        softly
            .assertThat(printed.toString())
            .as("the exception as a log prints it, causes included, for " + form.get(0))
            .doesNotContain(form.get(1));
      }
    }
    softly
        .assertThat(logged.list)
        .extracting(ILoggingEvent::getFormattedMessage)
        .as("what the store logged")
        .noneMatch(message -> message.contains("hunter2") || message.contains("50%off"));
    softly.assertAll();
  }

  /**
   * Mode TRANSACTIONAL: the record's transaction is opened before the claim, on a connection of the
   * same DataSource. Refused for its URL, it was reported as an outage of the database, with the
   * URL and its password in the exception's message.
   */
  @Test
  void aTransactionOverAUrlNoDriverAcceptsIsNamedNotTakenForAnOutage() {
    ConnectionSource driverManager =
        new ConnectionSource() {
          @Override
          public Connection getConnection() throws SQLException {
            return DriverManager.getConnection(
                TestDatabase.baseUrl().replace("jdbc:postgresql:", "jdbc:postgres:")
                    + "&password=hunter2");
          }
        };
    TransactionBoundDataSource transactions = TransactionBoundDataSource.of(driverManager);
    AtomicInteger works = new AtomicInteger();

    Throwable thrown = catchThrowable(() -> transactions.inTransaction(works::incrementAndGet));

    assertThat(works).as("work run").hasValue(0);
    assertThat(thrown)
        .as("what opening the transaction threw")
        .isInstanceOf(DedupException.class)
        .isNotInstanceOf(DedupStoreUnavailableException.class)
        .hasMessageContaining("No JDBC driver accepts the URL of the dedup table's DataSource")
        .hasMessageNotContaining("hunter2");
  }

  @Test
  void aUrlNoDriverAcceptsAtRunTimeIsNamedOnceNotRetriedAsAnOutage() {
    String goodUrl = TestDatabase.url(fixture.schema());
    String misspelled = goodUrl.replace("jdbc:postgresql:", "jdbc:postgres:") + "&password=hunter2";
    AtomicInteger connectionsAsked = new AtomicInteger();
    String[] url = {goodUrl};
    ConnectionSource driverManager =
        new ConnectionSource() {
          @Override
          public Connection getConnection() throws SQLException {
            connectionsAsked.incrementAndGet();
            return DriverManager.getConnection(url[0]);
          }
        };
    JdbcDedupStore store = JdbcDedupStore.builder(driverManager).build();
    AtomicInteger charges = new AtomicInteger();
    try (IdempotentExecutor executor = IdempotentExecutor.builder(store).build()) {
      url[0] = misspelled; // the DataSource's URL changes after the build checked the table
      connectionsAsked.set(0);
      logged.start();
      storeLog.addAppender(logged);

      Throwable thrown =
          catchThrowable(
              () -> executor.execute(DedupKey.of("payment", "RT-1"), charges::incrementAndGet));

      assertThat(charges).as("handler runs").hasValue(0);
      assertThat(thrown)
          .as("what the claim threw")
          .isInstanceOf(DedupException.class)
          .isNotInstanceOf(DedupStoreUnavailableException.class)
          .hasMessageContaining("No JDBC driver accepts the URL of the dedup table's DataSource")
          .hasMessageContaining("(the rest of it is not shown: it may hold a password)")
          .hasMessageNotContaining("hunter2");
      assertThat(Disposition.of(thrown)).as("disposition").isEqualTo(Disposition.RETRY_LATER);
      assertThat(connectionsAsked).as("connections asked for by the claim").hasValue(1);
      assertThat(logged.list)
          .extracting(ILoggingEvent::getFormattedMessage)
          .as("what the store logged")
          .noneMatch(message -> message.contains("hunter2"));
    }
  }
}
