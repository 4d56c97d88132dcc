-- The notification service's projection: what each session's owner is told, and what they
-- have read. Its consumer applies each event once, in the transaction that changes these rows;
-- the gateway serves them.
CREATE SCHEMA notification;
GRANT USAGE ON SCHEMA notification TO berth_service;
-- What a notice needs of a session: its owner and its name.
CREATE TABLE notification.sessions (
    session_id uuid PRIMARY KEY,
    owner      uuid NOT NULL,
    name       text NOT NULL
);
-- One row per notice; its id is the id of the event it tells of.
CREATE TABLE notification.notices (
    notice_id    uuid        PRIMARY KEY,
    user_id      uuid        NOT NULL,
    session_id   uuid        NOT NULL,
    session_name text        NOT NULL,
    kind         text        NOT NULL,
    message      text        NOT NULL,
    at           timestamptz NOT NULL,
    read_at      timestamptz
);
CREATE INDEX notices_by_user ON notification.notices (user_id, at DESC, notice_id DESC);
CREATE INDEX unread_by_user ON notification.notices (user_id) WHERE read_at IS NULL;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA notification TO berth_service;
-- Webhooks: each user's, and each notice to deliver to one (written with the notice, sent and
-- retried by the service's sender).
CREATE TABLE notification.webhooks (
    user_id uuid PRIMARY KEY,
    url     text NOT NULL
);
CREATE TABLE notification.deliveries (
    notice_id    uuid        PRIMARY KEY,
    url          text        NOT NULL,
    body         text        NOT NULL,
    attempts     integer     NOT NULL,
    next_at      timestamptz NOT NULL,
    delivered_at timestamptz,
    last_error   text
);
CREATE INDEX deliveries_due ON notification.deliveries (next_at) WHERE delivered_at IS NULL;
GRANT SELECT, INSERT, UPDATE, DELETE ON notification.webhooks, notification.deliveries TO berth_service;
