-- The recorder's tables: what agents send that is not history (logs and usage are large or
-- sampled every few seconds, heartbeats are liveness), kept outside the log in schema
-- `recorder`. The recorder alone writes them; the gateway and the scheduler read them.
--
-- Until the service owned its schema, the backbone's migrations 0003, 0005, 0008, 0009 and
-- 0024 made these tables in schema `public`; a database migrated then has them there, without
-- this migration in its history, and they move here with their rows and grants. Hence every
-- statement is one that a second run leaves as it found (IF EXISTS, IF NOT EXISTS, GRANT).
CREATE SCHEMA IF NOT EXISTS recorder;
GRANT USAGE ON SCHEMA recorder TO berth_service;
ALTER TABLE IF EXISTS public.session_logs SET SCHEMA recorder;
ALTER TABLE IF EXISTS public.session_usage SET SCHEMA recorder;
ALTER TABLE IF EXISTS public.agent_liveness SET SCHEMA recorder;
ALTER TABLE IF EXISTS public.liveness_watch SET SCHEMA recorder;

-- Container output of each kernel, kept while it runs and after it ends (logs are not events:
-- they are large, and nothing is decided on them). Output arrives over the bus as chunks of a
-- reading of the kernel's output (`epoch`, a time-ordered id: an agent that restarts reads the
-- output again under a later one) at a byte offset within it; keeping how many bytes of which
-- reading are held lets the sink append a redelivered chunk exactly once.
CREATE TABLE IF NOT EXISTS recorder.session_logs (
    session_id uuid        NOT NULL,
    kernel     integer     NOT NULL,
    content    text        NOT NULL,
    complete   boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now(),
    epoch      uuid,
    kept_bytes bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, kernel)
);
-- The latest resource-usage sample of each session's main container (telemetry, like logs),
-- with the use of the GPUs its main kernel holds (NVML, or its mock devices): mean
-- utilization and memory used, in percent; none where it holds no GPU or they were not
-- measured.
CREATE TABLE IF NOT EXISTS recorder.session_usage (
    session_id         uuid PRIMARY KEY,
    cpu_seconds        float8      NOT NULL,
    cpu_percent        float8,
    memory_bytes       bigint      NOT NULL,
    rx_bytes           bigint      NOT NULL,
    tx_bytes           bigint      NOT NULL,
    sampled_at         timestamptz NOT NULL DEFAULT now(),
    gpu_percent        float8,
    gpu_memory_percent float8
);
-- Liveness is not history: when each agent was last heard from (written from heartbeats;
-- only changes, an agent lost or returned, are events).
CREATE TABLE IF NOT EXISTS recorder.agent_liveness (
    agent_id text        PRIMARY KEY,
    seen_at  timestamptz NOT NULL
);
-- Each recorder's own watch: since when it has been listening to agents without a break
-- (a NATS outage restarts it), and when it last said so. The scheduler's reconciler calls an agent
-- lost only while some recorder has listened for longer than the agent has been silent, so a bus
-- outage never makes every agent look lost at once.
CREATE TABLE IF NOT EXISTS recorder.liveness_watch (
    watcher         text        PRIMARY KEY,
    listening_since timestamptz NOT NULL,
    checked_at      timestamptz NOT NULL
);

-- A database migrated part of the way before (its tables moved above, without the columns
-- the backbone's 0008 and 0024 added later) gets them here; on the others these change
-- nothing.
ALTER TABLE recorder.session_logs
    ADD COLUMN IF NOT EXISTS epoch uuid,
    ADD COLUMN IF NOT EXISTS kept_bytes bigint;
UPDATE recorder.session_logs SET kept_bytes = octet_length(content) WHERE kept_bytes IS NULL;
ALTER TABLE recorder.session_logs
    ALTER COLUMN kept_bytes SET DEFAULT 0,
    ALTER COLUMN kept_bytes SET NOT NULL;
ALTER TABLE recorder.session_usage
    ADD COLUMN IF NOT EXISTS gpu_percent float8,
    ADD COLUMN IF NOT EXISTS gpu_memory_percent float8;

GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA recorder TO berth_service;
