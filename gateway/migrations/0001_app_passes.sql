-- The app proxy's passes, shared by every gateway against this database, so that a link
-- made on one gateway is redeemed on another and a cookie handed out before a restart still
-- lets its browser in. `tickets`: single-use links by the SHA-256 of their secret, each for
-- one circuit until `expires_at` (redeeming deletes the row, so two gateways cannot both
-- take it). `cookies`: the cookies logins handed out, by the SHA-256 of their secret, each
-- bound to one circuit; gone when the circuit closes. Neither is an event (a ticket lives a
-- minute; neither is folded from the log), hence a schema of the gateway's own, beside the
-- ledger, which `berth replay ledger` compares with the log.
CREATE SCHEMA IF NOT EXISTS proxy;
GRANT USAGE ON SCHEMA proxy TO berth_service;
CREATE TABLE IF NOT EXISTS proxy.tickets (
    ticket_sha256 bytea       PRIMARY KEY,
    circuit_id    uuid        NOT NULL,
    expires_at    timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS tickets_by_circuit ON proxy.tickets (circuit_id);
CREATE TABLE IF NOT EXISTS proxy.cookies (
    cookie_sha256 bytea       PRIMARY KEY,
    circuit_id    uuid        NOT NULL,
    issued_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS cookies_by_circuit ON proxy.cookies (circuit_id);
GRANT SELECT, INSERT, UPDATE, DELETE ON proxy.tickets, proxy.cookies TO berth_service;
