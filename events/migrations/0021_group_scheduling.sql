-- How a resource group's queue is ordered beyond its policy (`ResourceGroupSchedulingSet`):
-- fair share's half-life, look-back and resource weights (Slurm's TRES weights: per core, per
-- GiB, per GPU, each per second), and the starvation bound (0: none). And the highest
-- priority a resource policy lets its users ask for (NULL: 100).
ALTER TABLE ledger.resource_groups
    ADD COLUMN half_life_secs        bigint NOT NULL DEFAULT 604800,
    ADD COLUMN lookback_secs         bigint NOT NULL DEFAULT 2592000,
    ADD COLUMN weight_cpu_per_core   float8 NOT NULL DEFAULT 1,
    ADD COLUMN weight_memory_per_gib float8 NOT NULL DEFAULT 0.25,
    ADD COLUMN weight_gpu_per_device float8 NOT NULL DEFAULT 10,
    ADD COLUMN starve_after_secs     bigint NOT NULL DEFAULT 0;

ALTER TABLE ledger.policies ADD COLUMN max_session_priority integer;
