-- Output arrives over the bus as chunks of a reading of the kernel's output (`epoch`, a
-- time-ordered id: an agent that restarts reads the output again under a later one) at a byte
-- offset within it. Keeping how many bytes of which reading are held lets the sink append a
-- redelivered chunk exactly once.
ALTER TABLE session_logs
    ADD COLUMN epoch uuid,
    ADD COLUMN kept_bytes bigint NOT NULL DEFAULT 0;
UPDATE session_logs SET kept_bytes = octet_length(content);
