-- The private half of the SSH key each interactive session's agent made for it (the public
-- half is in the container's authorized_keys), which its owner downloads
-- (`GET /v1/sessions/{id}/ssh-key`). A secret (rule 14): kept here by the recorder, never in
-- an event, and erased with the session's apps when it gives back its resources.
CREATE TABLE secrets.ssh_keys (
    session_id  uuid PRIMARY KEY,
    private_key text NOT NULL
);
GRANT SELECT, INSERT, UPDATE, DELETE ON secrets.ssh_keys TO berth_service;
