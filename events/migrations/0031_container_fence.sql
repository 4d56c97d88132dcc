-- A resource policy's container bounds (`ResourcePolicySet.max_pids`, `.max_log_bytes`):
-- processes per container and the output kept per kernel; NULL: berth's defaults
-- (`domain::payloads::ContainerFence`).
ALTER TABLE ledger.policies ADD COLUMN max_pids integer, ADD COLUMN max_log_bytes bigint;
