package io.consumerdedup.spring.autoconfigure;

import io.consumerdedup.core.DedupAdmin;
import io.consumerdedup.core.DedupAdmin.LeaseFilter;
import io.consumerdedup.core.DedupAdmin.RecordQuery;
import io.consumerdedup.core.DedupKey;
import io.consumerdedup.core.DedupRecord;
import io.consumerdedup.core.DedupStatus;
import io.consumerdedup.core.DedupStoreDataException;
import io.consumerdedup.core.DedupStoreException;
import io.consumerdedup.core.internal.FailureTexts;
import io.consumerdedup.core.internal.StoredText;
import io.consumerdedup.jdbc.DedupJanitor;
import io.consumerdedup.jdbc.JdbcDedupStore;
import io.consumerdedup.jdbc.PurgeBacklog;
import java.time.Duration;
import java.time.Instant;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.jspecify.annotations.Nullable;
import org.springframework.boot.actuate.endpoint.SecurityContext;
import org.springframework.boot.actuate.endpoint.annotation.Endpoint;
import org.springframework.boot.actuate.endpoint.annotation.ReadOperation;
import org.springframework.boot.actuate.endpoint.annotation.Selector;
import org.springframework.boot.actuate.endpoint.annotation.WriteOperation;
import org.springframework.boot.actuate.endpoint.web.WebEndpointResponse;

/**
 * The {@code consumerdedup} Actuator endpoint: what the dedup table holds, without SQL, and the two
 * changes that unstick a key (see docs/operations.md).
 *
 * <ul>
 *   <li>{@code GET /actuator/consumerdedup}: counts per biz type and status, and, when this
 *       instance runs the janitor, the purge's backlog measured now ({@code purge}; {@value
 *       #UNKNOWN_BACKLOG} when the count fails, its reason under {@code purgeError}).
 *   <li>{@code GET /actuator/consumerdedup/records?status=&bizType=&lease=&limit=&after=}: records
 *       oldest first, a page at a time ({@code next} continues).
 *   <li>{@code GET /actuator/consumerdedup/record?bizType=&bizKey=}: one key.
 *   <li>{@code POST /actuator/consumerdedup/release} and {@code .../forget} with {@code {"bizType":
 *       ..., "bizKey": ..., "requestedBy": ...}}: only with {@code
 *       consumer-dedup.admin.write-enabled=true}, else 403. A release or forget of a key whose
 *       lease is still live answers 409 and changes nothing, unless the body says {@code "force":
 *       true} (the operator knows the holder is dead; if it is not, the handler runs twice).
 * </ul>
 *
 * <p>A request whose value the database refuses (a NUL in a filter or a cursor) answers 400, and
 * any request while the dedup table does not answer answers 503, each with the store's reason. A
 * record whose status a newer version of consumer-dedup wrote is shown with that status as stored
 * ({@code status=unknown} lists them); a release of it answers 409, and a forget too unless forced.
 */
@Endpoint(id = "consumerdedup")
public class ConsumerDedupEndpoint {
  private static final int DEFAULT_LIMIT = 50;

  /** What the summary and the health show under {@code purge} while the backlog is unknown. */
  static final String UNKNOWN_BACKLOG = "unknown";

  private final DedupAdmin admin;
  private final JdbcDedupStore store;
  private final boolean writeEnabled;
  private final @Nullable DedupJanitor janitor;

  public ConsumerDedupEndpoint(DedupAdmin admin, JdbcDedupStore store, boolean writeEnabled) {
    this(admin, store, writeEnabled, null);
  }

  /** With the janitor whose backlog the summary shows, if this instance runs one. */
  public ConsumerDedupEndpoint(
      DedupAdmin admin,
      JdbcDedupStore store,
      boolean writeEnabled,
      @Nullable DedupJanitor janitor) {
    this.admin = admin;
    this.store = store;
    this.writeEnabled = writeEnabled;
    this.janitor = janitor;
  }

  /** The counts per biz type and status. */
  @ReadOperation
  public WebEndpointResponse<Object> summary() {
    List<DedupAdmin.StatusCount> counts;
    try {
      counts = admin.counts();
    } catch (DedupStoreException e) {
      return storeFailure(e);
    } catch (RuntimeException | Error e) {
      return unexpectedFailure(e);
    }
    Map<String, Object> summary = new LinkedHashMap<>();
    summary.put("table", store.tableName());
    summary.put("dialect", store.dialect().map(Enum::name).orElse("unknown"));
    summary.put("writeEnabled", writeEnabled);
    summary.put(
        "counts",
        counts.stream()
            .map(c -> new CountView(c.bizType(), c.storedStatus(), c.count(), c.expiredLeases()))
            .toList());
    if (janitor != null) {
      try {
        janitor
            .measureBacklog()
            .ifPresent(backlog -> summary.put("purge", BacklogView.of(backlog)));
      } catch (DedupStoreException e) {
        summary.put("purge", UNKNOWN_BACKLOG);
        summary.put("purgeError", String.valueOf(e.getMessage()));
      } catch (RuntimeException | Error e) {
        // The counts are in hand: the summary shows them, as it does when the count is cancelled.
        summary.put("purge", UNKNOWN_BACKLOG);
        summary.put("purgeError", FailureTexts.describe(e));
      }
    }
    return ok(summary);
  }

  /** A list of records ({@code records}) or one record ({@code record}). */
  @ReadOperation
  public WebEndpointResponse<Object> read(
      @Selector String view,
      @Nullable String status,
      @Nullable String bizType,
      @Nullable String bizKey,
      @Nullable String lease,
      @Nullable Integer limit,
      @Nullable String after) {
    try {
      return switch (view) {
        case "records" -> ok(list(status, bizType, lease, limit, after));
        case "record" -> {
          DedupKey key = key(bizType, bizKey);
          yield admin
              .find(key)
              .<WebEndpointResponse<Object>>map(record -> ok(RecordView.of(record)))
              .orElseGet(() -> error(404, "No record of " + key));
        }
        default -> error(404, "Unknown view '" + view + "': records or record");
      };
    } catch (IllegalArgumentException e) {
      return error(400, String.valueOf(e.getMessage()));
    } catch (DedupStoreException e) {
      return storeFailure(e);
    } catch (RuntimeException | Error e) {
      return unexpectedFailure(e);
    }
  }

  /** {@code release} or {@code forget} one key, if write operations are enabled. */
  @WriteOperation
  public WebEndpointResponse<Object> change(
      @Selector String action,
      String bizType,
      String bizKey,
      @Nullable String requestedBy,
      @Nullable Boolean force,
      SecurityContext security) {
    if (!writeEnabled) {
      return error(
          403,
          "Write operations are disabled: set consumer-dedup.admin.write-enabled=true (and keep"
              + " the endpoint behind the application's actuator security)");
    }
    try {
      DedupKey key = key(bizType, bizKey);
      String who = requester(requestedBy, security);
      DedupAdmin.Change change =
          switch (action) {
            case "release" -> admin.release(key, who, Boolean.TRUE.equals(force));
            case "forget" -> admin.forget(key, who, Boolean.TRUE.equals(force));
            default ->
                throw new IllegalArgumentException(
                    "Unknown action '" + action + "': release or forget");
          };
      Map<String, Object> body = new LinkedHashMap<>();
      body.put("applied", change.applied());
      body.put("message", change.message());
      body.put("requestedBy", who);
      body.put("at", change.at().toString());
      body.put("before", change.before() == null ? null : RecordView.of(change.before()));
      return new WebEndpointResponse<>(body, status(change));
    } catch (IllegalArgumentException e) {
      return error(400, String.valueOf(e.getMessage()));
    } catch (DedupStoreException e) {
      return storeFailure(e);
    } catch (RuntimeException | Error e) {
      return unexpectedFailure(e);
    }
  }

  /**
   * 200 for a change, or none needed; 404 for an unknown key; 409 for a key left alone because
   * changing it could let its handler run twice: PROCESSING under a live lease, or in a status a
   * newer version wrote.
   */
  private static int status(DedupAdmin.Change change) {
    DedupRecord before = change.before();
    if (change.applied()) {
      return 200;
    }
    if (before == null) {
      return 404;
    }
    return before.status() == DedupStatus.PROCESSING || before.status() == DedupStatus.UNKNOWN
        ? 409
        : 200;
  }

  private Map<String, Object> list(
      @Nullable String status,
      @Nullable String bizType,
      @Nullable String lease,
      @Nullable Integer limit,
      @Nullable String after) {
    RecordQuery query =
        new RecordQuery(
            status == null ? null : filter("status", status, DedupStatus.class),
            bizType,
            lease == null ? LeaseFilter.ANY : filter("lease", lease, LeaseFilter.class),
            limit == null ? DEFAULT_LIMIT : limit,
            after);
    DedupAdmin.Page page = admin.list(query);
    Map<String, Object> body = new LinkedHashMap<>();
    body.put("records", page.records().stream().map(RecordView::of).toList());
    body.put("next", page.next());
    return body;
  }

  /** The constant {@code value} names, in any case; else a 400 naming the allowed values. */
  private static <E extends Enum<E>> E filter(String parameter, String value, Class<E> type) {
    for (E constant : type.getEnumConstants()) {
      if (constant.name().equalsIgnoreCase(value.strip())) {
        return constant;
      }
    }
    throw new IllegalArgumentException(
        parameter
            + " '"
            + value
            + "' is not one of "
            + Arrays.stream(type.getEnumConstants())
                .map(Enum::name)
                .collect(Collectors.joining(", "))
            + " (in any case)");
  }

  private static DedupKey key(@Nullable String bizType, @Nullable String bizKey) {
    if (bizType == null || bizKey == null) {
      throw new IllegalArgumentException("bizType and bizKey are required");
    }
    // The key as the application builds it: a long key names its stored sha256 form.
    return DedupKey.of(bizType, bizKey);
  }

  private static String requester(@Nullable String requestedBy, SecurityContext security) {
    String principal = security.getPrincipal() == null ? null : security.getPrincipal().getName();
    String given = requestedBy == null || requestedBy.isBlank() ? null : requestedBy.strip();
    if (principal != null) {
      int room = DedupAdmin.MAX_REQUESTED_BY_LENGTH - (given == null ? 0 : given.length() + 3);
      String who = recordable(principal, Math.max(room, MIN_PRINCIPAL_ROOM));
      return given == null ? who : who + " (" + given + ")";
    }
    if (given != null) {
      return given + " (unauthenticated)";
    }
    return "anonymous actuator request";
  }

  /** The room a principal's name keeps beside a long {@code requestedBy}. */
  private static final int MIN_PRINCIPAL_ROOM = 64;

  /**
   * The principal's name as the record and a log line can take it: the caller cannot correct it, so
   * it is not refused (it answered 400 blaming the {@code requestedBy} the caller never sent). A
   * control character (a line break would forge a line of the log) or an unpaired surrogate (stored
   * as {@code ?}) is written as its Java escape (backslash, u, four hex digits); a name longer than
   * {@code room} is cut, ending in an ellipsis.
   */
  private static String recordable(String principal, int room) {
    String name = principal.strip();
    if (name.isEmpty()) {
      return "(a principal without a name)";
    }
    StringBuilder safe = new StringBuilder(name.length());
    for (int i = 0; i < name.length(); i++) {
      char c = name.charAt(i);
      boolean paired =
          Character.isHighSurrogate(c)
              && i + 1 < name.length()
              && Character.isLowSurrogate(name.charAt(i + 1));
      if (paired) {
        safe.append(c).append(name.charAt(++i));
      } else if (Character.isISOControl(c) || Character.isSurrogate(c)) {
        safe.append(String.format("\\u%04X", (int) c));
      } else {
        safe.append(c);
      }
    }
    return safe.length() <= room
        ? safe.toString()
        : StoredText.cut(safe.toString(), room - 1) + "\u2026";
  }

  private static WebEndpointResponse<Object> ok(Object body) {
    return new WebEndpointResponse<>(body, 200);
  }

  /**
   * A value the database refused (a NUL, a time beyond its range) is the caller's to correct: 400.
   * Anything else is the database's state, as the health shows it: 503. Either way with the reason,
   * which the web layer would drop from an exception's bare 500.
   */
  private static WebEndpointResponse<Object> storeFailure(DedupStoreException e) {
    return e instanceof DedupStoreDataException
        ? error(400, "The database refused a value of the request: " + e.getMessage())
        : error(503, "The dedup table did not answer: " + e.getMessage());
  }

  /**
   * Anything else that stopped the call (a DataSource or a connection that throws a {@code
   * RuntimeException} or an {@code Error}, such as a driver class that could not be initialised):
   * the table did not answer, as the health says it; the web layer answered a bare 500 without the
   * reason.
   */
  private static WebEndpointResponse<Object> unexpectedFailure(Throwable e) {
    return error(503, "The dedup table did not answer: " + FailureTexts.describe(e));
  }

  private static WebEndpointResponse<Object> error(int status, String message) {
    return new WebEndpointResponse<>(Map.of("error", message), status);
  }

  /**
   * The purge's backlog: expired records not purged yet (counted among the oldest; {@code atLeast}
   * when the count reached its sample), how long ago the oldest expired (ISO-8601, null when none)
   * and whether the janitor is behind.
   */
  public record BacklogView(
      long expiredRecords, boolean atLeast, @Nullable String oldestExpiredAge, boolean behind) {

    static BacklogView of(PurgeBacklog backlog) {
      return new BacklogView(
          backlog.expiredRows(),
          backlog.atLeast(),
          backlog.oldestExpired().map(Duration::toString).orElse(null),
          backlog.behind());
    }
  }

  /** A count as the endpoint shows it, the status as stored. */
  public record CountView(String bizType, String status, long count, long expiredLeases) {}

  /**
   * A record as the endpoint shows it: times as ISO-8601 UTC text, the status as stored (one a
   * newer version of consumer-dedup wrote as it is).
   */
  public record RecordView(
      String bizType,
      String bizKey,
      String status,
      int attempts,
      String owner,
      @Nullable String leaseUntil,
      boolean leaseLive,
      @Nullable String fingerprint,
      @Nullable String lastError,
      @Nullable String source,
      String createdAt,
      String updatedAt,
      String expiresAt) {

    static RecordView of(DedupRecord record) {
      return new RecordView(
          record.key().bizType(),
          record.key().bizKey(),
          record.storedStatus(),
          record.attempts(),
          record.owner(),
          record.leaseUntil().map(Instant::toString).orElse(null),
          record.isLeaseLive(),
          record.fingerprint().orElse(null),
          record.lastError().orElse(null),
          record.source().orElse(null),
          record.createdAt().toString(),
          record.updatedAt().toString(),
          record.expiresAt().toString());
    }
  }
}
