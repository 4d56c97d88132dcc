-- A resource policy's folder quota (`ResourcePolicySet.max_folder_bytes`, domain::folders::Quota):
-- the most bytes each folder of its users may hold; null: no limit.
ALTER TABLE ledger.policies ADD COLUMN max_folder_bytes bigint;
