-- The notification service's projection: what each session's owner is told, and what they
-- have read. Its consumer applies each event once, in the transaction that changes these rows;
-- the gateway serves them.
--
-- Until the service owned its schema, the backbone's migration 0011 made these same tables;
-- a database migrated then has them, without this migration in its history. Hence every
-- statement is one that a second run leaves as it found (IF NOT EXISTS, GRANT).
CREATE SCHEMA IF NOT EXISTS notification;
GRANT USAGE ON SCHEMA notification TO berth_service;
-- What a notice needs of a session: its owner and its name.
CREATE TABLE IF NOT EXISTS notification.sessions (
    session_id uuid PRIMARY KEY,
    owner      uuid NOT NULL,
    name       text NOT NULL
);
-- One row per notice; its id is the id of the event it tells of.
CREATE TABLE IF NOT EXISTS notification.notices (
    notice_id    uuid        PRIMARY KEY,
    user_id      uuid        NOT NULL,
    session_id   uuid        NOT NULL,
    session_name text        NOT NULL,
    kind         text        NOT NULL,
    message      text        NOT NULL,
    at           timestamptz NOT NULL,
    read_at      timestamptz
);
CREATE INDEX IF NOT EXISTS notices_by_user ON notification.notices (user_id, at DESC, notice_id DESC);
CREATE INDEX IF NOT EXISTS unread_by_user ON notification.notices (user_id) WHERE read_at IS NULL;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA notification TO berth_service;
-- Webhooks: each user's, and each notice to deliver to one (written with the notice, sent and
-- retried by the service's sender).
CREATE TABLE IF NOT EXISTS notification.webhooks (
    user_id uuid PRIMARY KEY,
    url     text NOT NULL
);
CREATE TABLE IF NOT EXISTS notification.deliveries (
    notice_id    uuid        PRIMARY KEY,
    url          text        NOT NULL,
    body         text        NOT NULL,
    attempts     integer     NOT NULL,
    next_at      timestamptz NOT NULL,
    delivered_at timestamptz,
    last_error   text
);
CREATE INDEX IF NOT EXISTS deliveries_due ON notification.deliveries (next_at) WHERE delivered_at IS NULL;
GRANT SELECT, INSERT, UPDATE, DELETE ON notification.webhooks, notification.deliveries TO berth_service;
