-- The use of the GPUs a session's main kernel holds, sampled by its agent with the rest
-- (NVML, or its mock devices): mean utilization and memory used, in percent; none where it
-- holds no GPU or they were not measured.
ALTER TABLE session_usage ADD COLUMN gpu_percent float8;
ALTER TABLE session_usage ADD COLUMN gpu_memory_percent float8;
