-- The trace a session's journey belongs to: the `traceparent` its SessionRequested was
-- recorded with (the HTTP request that created it). The scheduler and the agent continue
-- this trace when they act on the session, so one trace id runs from the create through
-- placement to the container's start and end (rule 7).
ALTER TABLE ledger.sessions ADD COLUMN traceparent text;
