-- consumer-dedup: one row per business action (biz_type, biz_key) that a Kafka consumer has claimed.
-- Apply with Flyway (this file follows its naming) or psql. Rename the table by editing this file and
-- passing the same name to JdbcDedupStore.builder(...).tableName(...).
--
-- Rows change status in place (PROCESSING -> SUCCESS or FAILED, FAILED -> PROCESSING on a retry), so
-- the table keeps free space in each page (fillfactor) and indexes none of the columns those updates
-- touch: PostgreSQL can then update rows as HOT updates, without touching any index. Half of each
-- page is kept free because a poll's claims are fresh rows packed together on the table's last
-- pages and its SUCCESS marks follow before any other change: each row's new version must fit on
-- its own page, beside the old one. With 80 about half of them did not fit, and each of those wrote
-- an entry into both indexes and more WAL; the table ends up no larger, the old versions' space
-- being reused on the same page.

CREATE TABLE consumer_dedup (
    biz_type    varchar(64)   NOT NULL,
    biz_key     varchar(256)  NOT NULL,
    status      varchar(16)   NOT NULL,
    attempts    integer       NOT NULL DEFAULT 1,
    owner       varchar(128)  NOT NULL,
    lease_until timestamptz,
    fingerprint varchar(64),
    last_error  varchar(2000),
    source      varchar(300),
    created_at  timestamptz   NOT NULL DEFAULT now(),
    updated_at  timestamptz   NOT NULL DEFAULT now(),
    expires_at  timestamptz   NOT NULL,
    claim_id    varchar(64),
    CONSTRAINT consumer_dedup_pk PRIMARY KEY (biz_type, biz_key),
    CONSTRAINT consumer_dedup_status_ck CHECK (status IN ('PROCESSING', 'SUCCESS', 'FAILED')),
    CONSTRAINT consumer_dedup_attempts_ck CHECK (attempts >= 1)
) WITH (
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_analyze_scale_factor = 0.02
);

-- The only secondary index, for the purge: it walks rows oldest first and deletes those whose
-- expires_at has passed. created_at is written once, when the key is first claimed; no status
-- change, renewal or retry touches it (nor the key), so every update can be HOT. An index on
-- expires_at, which every status change moves, would make each of them write an index entry.
CREATE INDEX consumer_dedup_created_idx ON consumer_dedup (created_at);

COMMENT ON TABLE consumer_dedup IS
    'consumer-dedup: business actions claimed by idempotent Kafka consumers, one row per (biz_type, biz_key)';
COMMENT ON COLUMN consumer_dedup.biz_type IS
    'Kind of business action (payment, order, points); each consumer of one event uses its own';
COMMENT ON COLUMN consumer_dedup.biz_key IS
    'Business key (order number, external transaction id); keys over 256 chars are stored as sha256:<hex>';
COMMENT ON COLUMN consumer_dedup.status IS
    'PROCESSING (a holder runs the handler under a lease), SUCCESS (applied once) or FAILED (next delivery retries)';
COMMENT ON COLUMN consumer_dedup.attempts IS
    'Number of claims so far; doubles as the fencing token that every status change must present';
COMMENT ON COLUMN consumer_dedup.owner IS
    'Consumer instance holding (PROCESSING) or last holding the lease: host, pid and a random part';
COMMENT ON COLUMN consumer_dedup.lease_until IS
    'While PROCESSING: database time after which another consumer may take the key over';
COMMENT ON COLUMN consumer_dedup.fingerprint IS
    'Optional payload fingerprint; a later delivery with another fingerprint under the same key is a conflict';
COMMENT ON COLUMN consumer_dedup.last_error IS
    'Error of the last failed attempt (class and message), truncated to 2000 chars';
COMMENT ON COLUMN consumer_dedup.source IS
    'Where the claiming delivery came from, e.g. topic-partition@offset';
COMMENT ON COLUMN consumer_dedup.created_at IS
    'Database time of the first claim';
COMMENT ON COLUMN consumer_dedup.updated_at IS
    'Database time of the last status change or lease renewal';
COMMENT ON COLUMN consumer_dedup.claim_id IS
    'Random id of the claim that wrote the row: a claim sent again after its reply was lost recognises its own row';
COMMENT ON COLUMN consumer_dedup.expires_at IS
    'Database time after which the purge may delete the row: set from the retention on every claim, SUCCESS and FAILED';
