-- Image names claimed by commits under way: a claim is made with `SessionCommitRequested`,
-- in the transaction that records it and under a lock per owner, so that two commits of one
-- user cannot both pass the policy's limit nor take the same name; it is let go with
-- `SessionCommitEnded`, whatever the outcome.
CREATE TABLE ledger.image_claims (
    image      text PRIMARY KEY,
    owner      uuid NOT NULL,
    session_id uuid NOT NULL,
    commit_id  uuid NOT NULL
);
CREATE INDEX image_claims_by_owner ON ledger.image_claims (owner);
GRANT SELECT, INSERT, UPDATE, DELETE ON ledger.image_claims TO berth_service;

-- Commits under way when this migration runs hold their claim, as if made when requested.
INSERT INTO ledger.image_claims
SELECT DISTINCT ON (r.payload->>'image')
       r.payload->>'image', (r.payload->>'owner')::uuid, (r.payload->>'session_id')::uuid,
       (r.payload->>'commit_id')::uuid
  FROM events r
 WHERE r.event_type = 'SessionCommitRequested'
   AND NOT EXISTS (SELECT 1 FROM events e
                    WHERE e.event_type = 'SessionCommitEnded'
                      AND e.payload->>'commit_id' = r.payload->>'commit_id')
 ORDER BY r.payload->>'image', r.tx_id DESC, r.seq DESC
ON CONFLICT DO NOTHING;
