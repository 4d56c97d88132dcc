-- The role every berth service runs as, so that the database itself keeps the promise that
-- no code updates or deletes an event: `berth_service` may append to and read the log
-- (`events`, `event_seals`) but not change or remove a row of it. It may do everything else
-- the services do: keep the ledger and checkpoints, and create, drop and rebuild the
-- projections' schemas. Migrations run as the owner, which keeps every right. (The
-- recorder's logs and usage, once granted here, are its own schema's now: see
-- services/recorder/migrations/0001_recorder.sql.)
--
-- Pools switch to this role on each new connection (events::store::pool). Roles belong to
-- the server, not to one database, so its creation tolerates another database's migration
-- creating it at the same moment.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'berth_service') THEN
        BEGIN
            CREATE ROLE berth_service NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
    -- A superuser may switch to any role; any other owner needs the membership.
    IF NOT pg_has_role(current_user, 'berth_service', 'MEMBER') THEN
        EXECUTE format('GRANT berth_service TO %I', current_user);
    END IF;
    EXECUTE format('GRANT CONNECT, TEMPORARY, CREATE ON DATABASE %I TO berth_service',
                   current_database());
END
$$;

GRANT USAGE, CREATE ON SCHEMA public TO berth_service;
GRANT USAGE ON SCHEMA ledger TO berth_service;

-- The log: append and read, never change.
GRANT SELECT, INSERT ON events, event_seals TO berth_service;
REVOKE UPDATE, DELETE, TRUNCATE ON events, event_seals FROM berth_service;

-- Everything else the services keep.
GRANT SELECT, INSERT, UPDATE, DELETE ON audit_head, checkpoints, processed_events
    TO berth_service;
GRANT SELECT ON schema_migrations TO berth_service;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ledger TO berth_service;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public, ledger TO berth_service;
-- Tables later migrations add to the ledger come with the same rights.
ALTER DEFAULT PRIVILEGES IN SCHEMA ledger
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO berth_service;

-- Projections built before this migration belong to the owner; hand them to the role that
-- folds, rebuilds and swaps them from now on.
DO $$
DECLARE
    schema_name text;
    table_name text;
BEGIN
    FOR schema_name IN SELECT nspname FROM pg_namespace WHERE nspname LIKE 'proj\_%' LOOP
        EXECUTE format('ALTER SCHEMA %I OWNER TO berth_service', schema_name);
        FOR table_name IN SELECT tablename FROM pg_tables WHERE schemaname = schema_name LOOP
            EXECUTE format('ALTER TABLE %I.%I OWNER TO berth_service', schema_name, table_name);
        END LOOP;
    END LOOP;
END
$$;
