-- Container output of each kernel, kept by the agent while it runs and after it ends (logs are
-- not events: they are large, and nothing is decided on them).
CREATE TABLE session_logs (
    session_id uuid        NOT NULL,
    kernel     integer     NOT NULL,
    content    text        NOT NULL,
    complete   boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, kernel)
);
