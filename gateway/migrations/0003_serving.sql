-- Model serving's own tables. The tokens that let a caller through to a model-serving endpoint that is not public, by
-- the SHA-256 of the token (the token itself is shown once, to the owner who made it, and
-- kept nowhere). Outside the log: a secret is never an event's payload, since the log cannot
-- forget; the log says only that a token was made and until when (`EndpointTokenIssued`,
-- recorded in the same transaction as the row). Shared by every gateway, so a token made on
-- one is honoured by all.
CREATE SCHEMA IF NOT EXISTS serving;
GRANT USAGE ON SCHEMA serving TO berth_service;
CREATE TABLE IF NOT EXISTS serving.tokens (
    token_id    uuid        PRIMARY KEY,
    endpoint_id uuid        NOT NULL,
    digest      bytea       NOT NULL UNIQUE,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS tokens_by_endpoint ON serving.tokens (endpoint_id);
GRANT SELECT, INSERT, DELETE ON serving.tokens TO berth_service;

-- Each gateway's calls of each endpoint over its last few seconds, written every second by
-- the gateway that balanced them, so the one running the replicas decides autoscaling on the
-- calls every gateway saw (rows not written lately are of a gateway gone, and not counted).
-- Liveness, not history: the figures a scaling decided on are in its event.
CREATE TABLE IF NOT EXISTS serving.traffic (
    gateway_id          uuid             NOT NULL,
    endpoint_id         uuid             NOT NULL,
    requests_per_second double precision NOT NULL,
    outstanding         integer          NOT NULL,
    at                  timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (gateway_id, endpoint_id)
);
GRANT SELECT, INSERT, UPDATE, DELETE ON serving.traffic TO berth_service;
