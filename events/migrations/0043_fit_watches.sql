-- "Notify me when it fits": the shapes users watch, until the scheduler finds one would be
-- placed at once (`FitWatchRequested`, removed by `FitWatchFired`). The scheduler reads the
-- open ones as it passes.
CREATE TABLE ledger.fit_watches (
    watch_id       uuid PRIMARY KEY,
    owner          uuid        NOT NULL,
    resource_group text        NOT NULL,
    shape          jsonb       NOT NULL,
    label          text        NOT NULL,
    requested_at   timestamptz NOT NULL
);
GRANT SELECT, INSERT, UPDATE, DELETE ON ledger.fit_watches TO berth_service;
