-- The ledger: write-side tables that commands decide on (who a key belongs to, what an agent
-- has free, which names are taken, what waits in the queue). Each row is changed only in the
-- transaction that appends the event causing the change (events::ledger), so it is exactly
-- as fresh as the log, and everything here can be folded again from the log.
CREATE SCHEMA ledger;

CREATE TABLE ledger.users (
    user_id         uuid PRIMARY KEY,
    email           text NOT NULL UNIQUE,
    role            text NOT NULL,
    resource_policy text NOT NULL,
    created_at      timestamptz NOT NULL
);

CREATE TABLE ledger.api_keys (
    key_sha256 text PRIMARY KEY,
    key_prefix text NOT NULL,
    user_id    uuid NOT NULL
);

CREATE TABLE ledger.projects (
    name        text PRIMARY KEY,
    description text NOT NULL
);

CREATE TABLE ledger.project_members (
    project text NOT NULL,
    user_id uuid NOT NULL,
    PRIMARY KEY (project, user_id)
);

CREATE TABLE ledger.resource_groups (
    name                 text PRIMARY KEY,
    queue_policy         text NOT NULL,
    agent_selection      text NOT NULL,
    max_attempts         integer NOT NULL,
    skip_after           integer NOT NULL,
    pending_timeout_secs bigint NOT NULL
);

CREATE TABLE ledger.group_projects (
    resource_group text NOT NULL,
    project        text NOT NULL,
    PRIMARY KEY (resource_group, project)
);

CREATE TABLE ledger.policies (
    name                      text PRIMARY KEY,
    max_concurrent_sessions   integer NOT NULL,
    max_cpu_milli             bigint NOT NULL,
    max_memory_bytes          bigint NOT NULL,
    max_gpu_milli             bigint NOT NULL,
    max_session_lifetime_secs bigint
);

CREATE TABLE ledger.presets (
    name                text PRIMARY KEY,
    cpu_milli           bigint NOT NULL,
    memory_bytes        bigint NOT NULL,
    gpu_milli           bigint NOT NULL,
    shared_memory_bytes bigint NOT NULL
);

-- `used_*` never exceeds the capacity: the conditional update that reserves refuses, and
-- the check is the last line of defence when two schedulers race.
CREATE TABLE ledger.agents (
    agent_id          text PRIMARY KEY,
    resource_group    text NOT NULL,
    cpu_milli         bigint NOT NULL,
    memory_bytes      bigint NOT NULL,
    gpu_milli         bigint NOT NULL,
    used_cpu_milli    bigint NOT NULL DEFAULT 0,
    used_memory_bytes bigint NOT NULL DEFAULT 0,
    used_gpu_milli    bigint NOT NULL DEFAULT 0,
    images            text[] NOT NULL DEFAULT '{}',
    registered_at     timestamptz NOT NULL,
    last_heartbeat    timestamptz NOT NULL,
    lost              text,
    CONSTRAINT agents_not_overcommitted CHECK (
        used_cpu_milli BETWEEN 0 AND cpu_milli
        AND used_memory_bytes BETWEEN 0 AND memory_bytes
        AND used_gpu_milli BETWEEN 0 AND gpu_milli)
);
CREATE INDEX ON ledger.agents (resource_group);

CREATE TABLE ledger.sessions (
    session_id            uuid PRIMARY KEY,
    queue_seq             bigint GENERATED ALWAYS AS IDENTITY,
    owner                 uuid NOT NULL,
    owner_email           text NOT NULL,
    name                  text NOT NULL,
    project               text,
    resource_group        text NOT NULL,
    session_type          text NOT NULL,
    status                text NOT NULL,
    status_reason         text,
    status_since          timestamptz NOT NULL,
    cpu_milli             bigint NOT NULL,
    memory_bytes          bigint NOT NULL,
    gpu_milli             bigint NOT NULL,
    cluster_mode          text NOT NULL,
    cluster_size          integer NOT NULL,
    wanted_agent          text,
    starts_at             timestamptz,
    created_at            timestamptz NOT NULL,
    attempts              integer NOT NULL DEFAULT 0,
    last_result           text,
    last_error_code       text,
    agent_id              text,
    holds                 boolean NOT NULL DEFAULT false,
    requeues              integer NOT NULL DEFAULT 0,
    version               bigint NOT NULL
);
-- A name is unique among the owner's live sessions.
CREATE UNIQUE INDEX sessions_live_name ON ledger.sessions (owner, name)
    WHERE status NOT IN ('TERMINATED', 'ERROR', 'CANCELLED');
CREATE INDEX sessions_queue ON ledger.sessions (resource_group, queue_seq) WHERE status = 'PENDING';
CREATE INDEX sessions_owner_live ON ledger.sessions (owner)
    WHERE status NOT IN ('TERMINATED', 'ERROR', 'CANCELLED');
CREATE INDEX sessions_in_flight ON ledger.sessions (status_since)
    WHERE status NOT IN ('PENDING', 'RUNNING', 'TERMINATED', 'ERROR', 'CANCELLED');

-- Where each kernel of a placed session holds its share, until released.
CREATE TABLE ledger.kernels (
    session_id   uuid NOT NULL,
    idx          integer NOT NULL,
    agent_id     text NOT NULL,
    cpu_milli    bigint NOT NULL,
    memory_bytes bigint NOT NULL,
    gpu_milli    bigint NOT NULL,
    PRIMARY KEY (session_id, idx)
);
CREATE INDEX ON ledger.kernels (agent_id);
