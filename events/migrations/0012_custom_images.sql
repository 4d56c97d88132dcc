-- Customized images: a policy's most per user, and each user's images as committed sessions
-- made them (folded from `SessionCommitEnded` and `CustomImageRemoved`). It made the
-- image-commit service's `image_commit.pending` too, until that service owned its schema
-- (services/image-commit/migrations).
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
