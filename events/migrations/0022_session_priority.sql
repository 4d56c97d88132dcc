-- A session's priority in its group's queue (`SessionRequested.priority`, changed by
-- `SessionPriorityChanged`); the queue is tried highest first (`events::sql::queue_order`).
ALTER TABLE ledger.sessions ADD COLUMN priority integer NOT NULL DEFAULT 10;
DROP INDEX ledger.sessions_queue;
CREATE INDEX sessions_queue ON ledger.sessions (resource_group, priority DESC, queue_seq)
    WHERE status = 'PENDING';

-- What each session held in its group from when it ran (RUNNING: the container's start when
-- the event carries it, else the event's time) until it stopped running (an end, or back to
-- the queue: that move's time) or its resources were released, whichever came first. Fair
-- share's decayed use is computed from these rows exactly (services/scheduler/src/fair_share.rs).
CREATE TABLE ledger.usage_intervals (
    session_id     uuid NOT NULL,
    started_at     timestamptz NOT NULL,
    ended_at       timestamptz,
    resource_group text NOT NULL,
    owner          uuid NOT NULL,
    project        text,
    cpu_milli      bigint NOT NULL,
    memory_bytes   bigint NOT NULL,
    gpu_milli      bigint NOT NULL,
    PRIMARY KEY (session_id, started_at)
);
CREATE INDEX usage_intervals_group ON ledger.usage_intervals (resource_group, ended_at);
