-- consumer-dedup: one row per business action (biz_type, biz_key) that a Kafka consumer has claimed.
-- MySQL 8.0+ and MariaDB 10.6+ (InnoDB). Apply with Flyway (this file follows its naming) or the mysql
-- client. Rename the table by editing this file and passing the same name to
-- JdbcDedupStore.builder(...).tableName(...).
--
-- Keys compare byte for byte: the server's default collation ignores case and accents, so 'A-1' and
-- 'a-1' would be one key and the second payment would be dropped as a duplicate. Even utf8mb4_bin is
-- not enough: it pads with spaces (PAD SPACE), so 'A-1' and 'A-1 ' would still be one key. The key
-- columns are therefore VARBINARY holding the key's UTF-8 bytes (the drivers convert on both ways;
-- four-byte characters such as emoji are kept), sized for the longest key the store writes (256
-- characters of up to 4 bytes; longer keys are stored as sha256:<hex>). Other text is utf8mb4.
--
-- Times are UTC wall-clock DATETIME(6) written from the database clock (UTC_TIMESTAMP(6)), never the
-- application's, and unaffected by the session time zone (TIMESTAMP would also end in 2038, within
-- reach of a long retention).

CREATE TABLE consumer_dedup (
    biz_type    VARBINARY(256) NOT NULL
        COMMENT 'Kind of business action (payment, order, points); each consumer of one event uses its own',
    biz_key     VARBINARY(1024) NOT NULL
        COMMENT 'Business key (order number, external transaction id); keys over 256 chars are stored as sha256:<hex>',
    status      VARCHAR(16)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL
        COMMENT 'PROCESSING (a holder runs the handler under a lease), SUCCESS (applied once) or FAILED (next delivery retries)',
    attempts    INT           NOT NULL DEFAULT 1
        COMMENT 'Number of claims so far; doubles as the fencing token that every status change must present',
    owner       VARCHAR(128)  NOT NULL
        COMMENT 'Consumer instance holding (PROCESSING) or last holding the lease: host, pid and a random part',
    lease_until DATETIME(6)   NULL
        COMMENT 'While PROCESSING: database time (UTC) after which another consumer may take the key over',
    fingerprint VARCHAR(64)   CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL
        COMMENT 'Optional payload fingerprint; a later delivery with another fingerprint under the same key is a conflict',
    last_error  VARCHAR(2000) NULL
        COMMENT 'Error of the last failed attempt (class and message), truncated to 2000 chars',
    source      VARCHAR(300)  NULL
        COMMENT 'Where the claiming delivery came from, e.g. topic-partition@offset',
    created_at  DATETIME(6)   NOT NULL
        COMMENT 'Database time (UTC) of the first claim',
    updated_at  DATETIME(6)   NOT NULL
        COMMENT 'Database time (UTC) of the last status change or lease renewal',
    expires_at  DATETIME(6)   NOT NULL
        COMMENT 'Database time (UTC) after which the purge may delete the row: set from the retention on every claim, SUCCESS and FAILED',
    claim_id    VARCHAR(64)   CHARACTER SET ascii COLLATE ascii_bin NULL
        COMMENT 'Random id of the claim that wrote the row: a claim sent again after its reply was lost recognises its own row',
    CONSTRAINT consumer_dedup_pk PRIMARY KEY (biz_type, biz_key),
    CONSTRAINT consumer_dedup_status_ck CHECK (status IN ('PROCESSING', 'SUCCESS', 'FAILED')),
    CONSTRAINT consumer_dedup_attempts_ck CHECK (attempts >= 1),
    -- For the purge, which deletes expired rows oldest first (created_at is written once).
    INDEX consumer_dedup_created_idx (created_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin
  COMMENT = 'consumer-dedup: business actions claimed by idempotent Kafka consumers, one row per (biz_type, biz_key)';
