-- The event log. One row per event; the truth of berth.
--
-- Order: `seq` is handed out at insert, not at commit, so it has gaps and commits can land
-- out of seq order. Readers therefore order by (tx_id, seq) and read only rows whose
-- transaction id is below the xmin of a fresh snapshot: every transaction below that horizon
-- has ended, so no row can ever appear behind a reader's cursor (docs/ARCHITECTURE.md).
CREATE TABLE events (
    tx_id          xid8        NOT NULL DEFAULT pg_current_xact_id(),
    seq            bigint      NOT NULL GENERATED ALWAYS AS IDENTITY,
    event_id       uuid        NOT NULL,
    stream_id      text        NOT NULL,
    category       text        NOT NULL,
    stream_version bigint      NOT NULL CHECK (stream_version >= 0),
    event_type     text        NOT NULL,
    schema_version integer     NOT NULL,
    payload        jsonb       NOT NULL,
    metadata       jsonb       NOT NULL,
    recorded_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tx_id, seq),
    CONSTRAINT events_stream_version_unique UNIQUE (stream_id, stream_version),
    CONSTRAINT events_event_id_unique UNIQUE (event_id)
);

-- The audit chain: a dense sequence over the log in read order, each link hashing the one
-- before it. Written by one sealer at a time, behind the horizon, never by appenders.
CREATE TABLE event_seals (
    audit_seq bigint PRIMARY KEY,
    tx_id     xid8   NOT NULL,
    seq       bigint NOT NULL,
    hash      bytea  NOT NULL,
    UNIQUE (tx_id, seq)
);

-- The chain's head: where sealing stopped and the hash there. Deleting the tail of the log
-- and of the seals together still leaves this row pointing past them.
CREATE TABLE audit_head (
    id        integer PRIMARY KEY CHECK (id = 1),
    audit_seq bigint  NOT NULL,
    tx_id     xid8    NOT NULL,
    seq       bigint  NOT NULL,
    hash      bytea   NOT NULL,
    sealed_at timestamptz NOT NULL
);

-- Where each reader of the log stopped (relay, projections), in read order.
CREATE TABLE checkpoints (
    name       text PRIMARY KEY,
    tx_id      xid8   NOT NULL,
    seq        bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Events a NATS consumer has applied, so a redelivery is not applied twice.
CREATE TABLE processed_events (
    consumer text NOT NULL,
    event_id uuid NOT NULL,
    PRIMARY KEY (consumer, event_id)
);
