-- Each kernel's output kept in bounded chunks, the most recent `cap_bytes` of it (the
-- session's policy's `max_log_bytes`): `recorder.session_logs` keeps the header (which
-- reading, how many bytes it has had in all, whether it is complete), the chunks hold the
-- text at its byte offset within the reading. Older chunks are deleted as new ones come, so
-- a kernel printing without end holds at most its cap and one chunk; reads take a byte range.
CREATE TABLE recorder.session_log_chunks (
    session_id uuid    NOT NULL,
    kernel     integer NOT NULL,
    start      bigint  NOT NULL,
    content    text    NOT NULL,
    PRIMARY KEY (session_id, kernel, start)
);
ALTER TABLE recorder.session_logs ADD COLUMN cap_bytes bigint NOT NULL DEFAULT 1048576;
-- What was kept as one value becomes one chunk at its offset.
INSERT INTO recorder.session_log_chunks (session_id, kernel, start, content)
    SELECT session_id, kernel, greatest(kept_bytes - octet_length(content), 0), content
    FROM recorder.session_logs WHERE content <> '';
UPDATE recorder.session_logs SET content = '' WHERE content <> '';
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA recorder TO berth_service;
