-- A user's launches, the launcher's "Recent History": each create request the launcher took,
-- kept whole so that it can be launched again (folded from `LaunchRecorded`), with the name
-- and the pin its user gave it (`LaunchRenamed`, `LaunchPinned`). The gateway lists a user's
-- newest and pinned ones.
CREATE TABLE ledger.launches (
    launch_id  uuid        PRIMARY KEY,
    user_id    uuid        NOT NULL,
    request    jsonb       NOT NULL,
    sessions   uuid[]      NOT NULL,
    label      text,
    pinned     boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL
);
CREATE INDEX launches_by_user ON ledger.launches (user_id, created_at);
CREATE INDEX launches_pinned ON ledger.launches (user_id) WHERE pinned;
GRANT SELECT, INSERT, UPDATE, DELETE ON ledger.launches TO berth_service;
