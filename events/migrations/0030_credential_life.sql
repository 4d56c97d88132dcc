-- Credentials with a life cycle: an API key may expire (`ApiKeyIssued.expires_at`) and be
-- revoked (`ApiKeyRevoked`, the row stays, refused); a user may be disabled (`UserDisabled`,
-- `UserEnabled`): their keys, keypairs and sign-ins are refused meanwhile.
ALTER TABLE ledger.api_keys
    ADD COLUMN expires_at timestamptz,
    ADD COLUMN revoked    boolean NOT NULL DEFAULT false;
ALTER TABLE ledger.users ADD COLUMN disabled boolean NOT NULL DEFAULT false;
CREATE INDEX api_keys_by_prefix ON ledger.api_keys (key_prefix);
