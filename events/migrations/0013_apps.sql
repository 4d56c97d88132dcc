-- App services: the apps started in a session's main kernel, with the secret each was
-- started with (from `AppStartEnded`; gone when the session gives back its resources); where an agent's published ports are reached and the apps its images declare
-- (from `AgentRegistered`), and the proxy's open circuits (from `AppCircuitOpened`, removed on
-- `AppCircuitClosed`). One open circuit per proxy port: two gateways racing for a port meet
-- here, and the second append fails instead of sharing it.
ALTER TABLE ledger.agents ADD COLUMN address text;
ALTER TABLE ledger.agents ADD COLUMN image_apps jsonb NOT NULL DEFAULT '{}';
CREATE TABLE ledger.circuits (
    circuit_id     uuid        PRIMARY KEY,
    session_id     uuid        NOT NULL,
    owner          uuid        NOT NULL,
    app            text        NOT NULL,
    protocol       text        NOT NULL,
    container_port integer     NOT NULL,
    port           integer     NOT NULL UNIQUE,
    admission      jsonb       NOT NULL,
    opened_at      timestamptz NOT NULL
);
CREATE INDEX circuits_by_session ON ledger.circuits (session_id);
GRANT SELECT, INSERT, UPDATE, DELETE ON ledger.circuits TO berth_service;
CREATE TABLE ledger.app_services (
    session_id uuid        NOT NULL,
    app        text        NOT NULL,
    token      text,
    started_at timestamptz NOT NULL,
    PRIMARY KEY (session_id, app)
);
GRANT SELECT, INSERT, UPDATE, DELETE ON ledger.app_services TO berth_service;
