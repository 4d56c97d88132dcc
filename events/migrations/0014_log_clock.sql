-- The log's clock. Events are ordered by the transaction id that wrote them, and readers read
-- behind the transaction horizon (0001). A logical restore (`pg_dump` into a new cluster)
-- does not carry the cluster's transaction counter over: a fresh cluster counts from a few
-- hundred again, so events written after the restore would sort before the restored ones,
-- behind every checkpoint. The log therefore counts on a clock of its own: the transaction id
-- plus an offset that `berth restore` sets on the database (`berth.xid_offset`, 0 until
-- then), so that the first transaction after a restore sorts after the last one before it.
-- Writers take `berth_log_tx_id()`, readers stop at `berth_log_horizon()`.
CREATE FUNCTION berth_xid_offset() RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT coalesce(nullif(current_setting('berth.xid_offset', true), '')::bigint, 0) $$;

CREATE FUNCTION berth_log_tx_id() RETURNS xid8
    LANGUAGE sql
    AS $$ SELECT (pg_current_xact_id()::text::bigint + berth_xid_offset())::text::xid8 $$;

CREATE FUNCTION berth_log_horizon() RETURNS xid8
    LANGUAGE sql STABLE
    AS $$ SELECT (pg_snapshot_xmin(pg_current_snapshot())::text::bigint
                  + berth_xid_offset())::text::xid8 $$;

ALTER TABLE events ALTER COLUMN tx_id SET DEFAULT berth_log_tx_id();

GRANT EXECUTE ON FUNCTION berth_xid_offset(), berth_log_tx_id(), berth_log_horizon()
    TO berth_service;
