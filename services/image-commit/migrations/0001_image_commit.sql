-- The image-commit service's commits in progress, each with when it was asked, so a commit
-- whose agent never reports its end fails after a deadline, across restarts.
--
-- Until the service owned its schema, the backbone's migration 0012 made this table (beside
-- the ledger's customized images, which stay there); a database migrated then has it, without
-- this migration in its history. Hence every statement is one that a second run leaves as it
-- found (IF NOT EXISTS, GRANT).
CREATE SCHEMA IF NOT EXISTS image_commit;
GRANT USAGE ON SCHEMA image_commit TO berth_service;
CREATE TABLE IF NOT EXISTS image_commit.pending (
    commit_id    uuid        PRIMARY KEY,
    session_id   uuid        NOT NULL,
    requested_at timestamptz NOT NULL
);
GRANT SELECT, INSERT, UPDATE, DELETE ON image_commit.pending TO berth_service;
