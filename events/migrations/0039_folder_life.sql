-- A folder's life (domain::folders): its usage mode (FolderCreated), when its owner moved it
-- to the trash (FolderTrashed; null once FolderRestored), and its shares following a rename
-- (FolderRenamed) and going with it when purged (FolderPurged).
ALTER TABLE ledger.folders
    ADD COLUMN usage_mode text NOT NULL DEFAULT 'general'
        CHECK (usage_mode IN ('general', 'model', 'data')),
    ADD COLUMN trashed_at timestamptz;
ALTER TABLE ledger.folder_shares
    DROP CONSTRAINT folder_shares_owner_name_fkey,
    ADD CONSTRAINT folder_shares_owner_name_fkey FOREIGN KEY (owner, name)
        REFERENCES ledger.folders (owner, name) ON UPDATE CASCADE ON DELETE CASCADE;
