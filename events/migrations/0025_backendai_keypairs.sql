-- Backend.AI keypairs (`BackendAiKeypairIssued`, `BackendAiKeypairRevoked`): who holds each
-- access key and whether it is still honoured. The secret key is not here: the gateway derives
-- it from the access key with a master key kept outside the database and the log.
CREATE TABLE ledger.backendai_keypairs (
    access_key text    PRIMARY KEY,
    user_id    uuid    NOT NULL,
    active     boolean NOT NULL
);
CREATE INDEX backendai_keypairs_by_user ON ledger.backendai_keypairs (user_id);
GRANT SELECT, INSERT, UPDATE, DELETE ON ledger.backendai_keypairs TO berth_service;
