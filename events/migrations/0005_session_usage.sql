-- The latest resource-usage sample of each session's main container, kept by its agent
-- (telemetry, like logs: sampled every few seconds, not events).
CREATE TABLE session_usage (
    session_id   uuid PRIMARY KEY,
    cpu_seconds  float8      NOT NULL,
    cpu_percent  float8,
    memory_bytes bigint      NOT NULL,
    rx_bytes     bigint      NOT NULL,
    tx_bytes     bigint      NOT NULL,
    sampled_at   timestamptz NOT NULL DEFAULT now()
);
