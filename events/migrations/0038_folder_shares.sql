-- Shared folders (domain::sharing): each share of a folder with a user (`grantee_kind` 'user',
-- `grantee` the user's id) or a project ('project', its name), read-only ('ro') or
-- read-write ('rw'). Folded from FolderShared and FolderUnshared.
CREATE TABLE ledger.folder_shares (
    owner uuid NOT NULL,
    name text NOT NULL,
    grantee_kind text NOT NULL CHECK (grantee_kind IN ('user', 'project')),
    grantee text NOT NULL,
    permission text NOT NULL CHECK (permission IN ('ro', 'rw')),
    PRIMARY KEY (owner, name, grantee_kind, grantee),
    FOREIGN KEY (owner, name) REFERENCES ledger.folders (owner, name)
);
CREATE INDEX folder_shares_by_grantee ON ledger.folder_shares (grantee_kind, grantee);
