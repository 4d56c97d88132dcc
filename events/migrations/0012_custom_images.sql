-- Customized images: a policy's most per user, and each user's images as committed sessions
-- made them (folded from `SessionCommitEnded` and `CustomImageRemoved`).
ALTER TABLE ledger.policies ADD COLUMN max_custom_images integer;
CREATE TABLE ledger.custom_images (
    image      text        PRIMARY KEY,
    owner      uuid        NOT NULL,
    session_id uuid        NOT NULL,
    agent_id   text,
    image_id   text        NOT NULL,
    size_bytes bigint      NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX custom_images_by_owner ON ledger.custom_images (owner);
GRANT SELECT, INSERT, UPDATE, DELETE ON ledger.custom_images TO berth_service;
-- The image-commit service's commits in progress, each with when it was asked, so a commit
-- whose agent never reports its end fails after a deadline, across restarts.
CREATE SCHEMA image_commit;
GRANT USAGE ON SCHEMA image_commit TO berth_service;
CREATE TABLE image_commit.pending (
    commit_id    uuid        PRIMARY KEY,
    session_id   uuid        NOT NULL,
    requested_at timestamptz NOT NULL
);
GRANT SELECT, INSERT, UPDATE, DELETE ON image_commit.pending TO berth_service;
