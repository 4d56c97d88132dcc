-- Secrets leave the log (rule 14): what must stay secret is kept here, in tables that can be
-- erased and that `berth backup` leaves out, never in an event's payload, since the log cannot
-- forget. `password_hashes`: each user's password as its Argon2id PHC string (the last one
-- set; `UserPasswordSet` now says only that one was set). `app_tokens`: the secret an app of a
-- session was started with, which the app proxy hands it (`AppStartEnded` now says only that
-- one was kept). Events recorded before this migration still hold theirs: docs/operations.md
-- ("Secrets written before 0032") says how an operator rotates them.
CREATE SCHEMA secrets;
GRANT USAGE ON SCHEMA secrets TO berth_service;

CREATE TABLE secrets.password_hashes (
    user_id       uuid PRIMARY KEY,
    password_hash text NOT NULL
);
GRANT SELECT, INSERT, UPDATE, DELETE ON secrets.password_hashes TO berth_service;
INSERT INTO secrets.password_hashes SELECT user_id, password_hash FROM ledger.user_passwords;
ALTER TABLE ledger.user_passwords DROP COLUMN password_hash;

CREATE TABLE secrets.app_tokens (
    session_id uuid NOT NULL,
    app        text NOT NULL,
    token      text NOT NULL,
    PRIMARY KEY (session_id, app)
);
GRANT SELECT, INSERT, UPDATE, DELETE ON secrets.app_tokens TO berth_service;
INSERT INTO secrets.app_tokens
    SELECT session_id, app, token FROM ledger.app_services WHERE token IS NOT NULL;
ALTER TABLE ledger.app_services DROP COLUMN token;
