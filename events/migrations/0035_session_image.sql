-- Each session's image in its row, so the scheduler can say in a placement's history where the
-- image already was (the others pull it). Sessions requested before this migration get theirs
-- from their request in the log.
ALTER TABLE ledger.sessions ADD COLUMN image text NOT NULL DEFAULT '';
UPDATE ledger.sessions s SET image = r.payload->>'image'
  FROM events r
 WHERE r.event_type = 'SessionRequested' AND (r.payload->>'session_id')::uuid = s.session_id;
