-- Named folders, per owner (write side; the ledger keeps them with the events that made them).
CREATE TABLE ledger.folders (
    owner      uuid NOT NULL,
    name       text NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (owner, name)
);
