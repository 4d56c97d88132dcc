-- The idle-reaper's fold of the log, kept so a restarted reaper goes on where it stopped
-- (its consumer applies each event once, in the transaction that changes these rows). The
-- usage it decides on is not kept: it reads the last window again from the telemetry stream.
--
-- Until the service owned its schema, the backbone's migration 0010 made these same tables;
-- a database migrated then has them, without this migration in its history. Hence every
-- statement is one that a second run leaves as it found (IF NOT EXISTS, GRANT).
CREATE SCHEMA IF NOT EXISTS idle_reaper;
GRANT USAGE ON SCHEMA idle_reaper TO berth_service;
-- The live sessions it watches (the domain's `Watched`, as JSON).
CREATE TABLE IF NOT EXISTS idle_reaper.watched (
    session_id uuid  PRIMARY KEY,
    watched    jsonb NOT NULL
);
-- The idle checks of each resource group and resource policy.
CREATE TABLE IF NOT EXISTS idle_reaper.checks (
    scope  jsonb PRIMARY KEY,
    checks jsonb NOT NULL
);
-- Each user's resource policy.
CREATE TABLE IF NOT EXISTS idle_reaper.owners (
    user_id uuid PRIMARY KEY,
    policy  text NOT NULL
);
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA idle_reaper TO berth_service;
