-- Registries an admin stored a credential for (`RegistryCredentialSet`, removed by
-- `RegistryCredentialRemoved`): their images are offered to every user, and an agent that
-- pulls one asks the recorder for the credential. The password is kept apart from the log
-- (rule 14), in `secrets.registry_credentials`, written in the transaction that records the
-- event; `berth backup` leaves it out, so a restored berth needs each one set again.
CREATE TABLE ledger.registries (
    registry text PRIMARY KEY,
    username text        NOT NULL,
    set_at   timestamptz NOT NULL
);
GRANT SELECT, INSERT, UPDATE, DELETE ON ledger.registries TO berth_service;

CREATE TABLE secrets.registry_credentials (
    registry text PRIMARY KEY,
    username text NOT NULL,
    password text NOT NULL
);
GRANT SELECT, INSERT, UPDATE, DELETE ON secrets.registry_credentials TO berth_service;
