-- Each session's usage over its whole life, bounded (`domain::usage`): every sample lands in
-- its minute's bucket and its hour's (the latest sample of a bucket stands for it); minute
-- buckets are kept for a day, hour buckets for at most 90 days. Not a projection of the log:
-- measurements, as `session_usage` (the latest sample) is.
CREATE TABLE recorder.usage_series (
    session_id    uuid        NOT NULL,
    width_secs    integer     NOT NULL CHECK (width_secs IN (60, 3600)),
    bucket        timestamptz NOT NULL,
    sampled_at    timestamptz NOT NULL,
    cpu_percent   double precision,
    memory_bytes  bigint      NOT NULL,
    network_bytes bigint      NOT NULL,
    gpu_percent   double precision,
    PRIMARY KEY (session_id, width_secs, bucket)
);
GRANT SELECT, INSERT, UPDATE, DELETE ON recorder.usage_series TO berth_service;
