-- Storage volumes (domain::volumes): each folder's volume (NULL: host-local, each agent's own
-- data directory, as for every folder made before volumes), the shared volumes each agent
-- mounts, and those each session needs (its folders' volumes), which the scheduler places by.
ALTER TABLE ledger.folders ADD COLUMN volume text;
ALTER TABLE ledger.agents ADD COLUMN volumes text[] NOT NULL DEFAULT '{}';
ALTER TABLE ledger.sessions ADD COLUMN volumes text[] NOT NULL DEFAULT '{}';
