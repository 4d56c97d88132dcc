-- What a person signs in with besides an API key. `user_passwords`: each user's password as
-- its Argon2id PHC string (from `UserPasswordSet`, the last one set; a user without a row has
-- none). `console_sign_ins`: the web console's sign-ins by the SHA-256 of their token (from
-- `ConsoleSignedIn`, removed on `ConsoleSignedOut`); one past `expires_at` is no longer
-- honoured, whether or not it was signed out.
CREATE TABLE ledger.user_passwords (
    user_id       uuid PRIMARY KEY,
    password_hash text NOT NULL
);
GRANT SELECT, INSERT, UPDATE, DELETE ON ledger.user_passwords TO berth_service;
CREATE TABLE ledger.console_sign_ins (
    token_sha256 text        PRIMARY KEY,
    user_id      uuid        NOT NULL,
    how          text        NOT NULL,
    expires_at   timestamptz NOT NULL
);
CREATE INDEX console_sign_ins_by_user ON ledger.console_sign_ins (user_id);
GRANT SELECT, INSERT, UPDATE, DELETE ON ledger.console_sign_ins TO berth_service;
