-- Each user's webhook signing secret (Standard Webhooks' HMAC-SHA256 key): made when their
-- webhook is first set (or, for a webhook set before secrets were, at its first delivery),
-- shown to them in the answer of `PUT /v1/notifications/webhook`, replaced by `POST
-- /v1/notifications/webhook/secret`. A secret is never an event payload (the log cannot
-- forget): it lives only here, where it can be replaced or erased. Not a projection: a
-- rebuild of the notification schema from the log cannot make it again. Like 0001, a second
-- run leaves it as it found it.
CREATE TABLE IF NOT EXISTS notification.webhook_secrets (
    user_id uuid        PRIMARY KEY,
    secret  bytea       NOT NULL,
    made_at timestamptz NOT NULL DEFAULT now()
);
GRANT SELECT, INSERT, UPDATE, DELETE ON notification.webhook_secrets TO berth_service;
