-- Liveness is not history: when each agent was last heard from, kept outside the log (the
-- recorder writes it from heartbeats; only changes, an agent lost or returned, are events).
CREATE TABLE agent_liveness (
    agent_id text        PRIMARY KEY,
    seen_at  timestamptz NOT NULL
);
-- Each recorder's own watch: since when it has been listening to agents without a break
-- (a NATS outage restarts it), and when it last said so. The reconciler calls an agent lost
-- only while some recorder has listened for longer than the agent has been silent, so a bus
-- outage never makes every agent look lost at once.
CREATE TABLE liveness_watch (
    watcher         text        PRIMARY KEY,
    listening_since timestamptz NOT NULL,
    checked_at      timestamptz NOT NULL
);
GRANT SELECT, INSERT, UPDATE, DELETE ON agent_liveness, liveness_watch TO berth_service;
