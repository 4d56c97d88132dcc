-- What each folder holds on its volume, as the agent of the last session that mounted it
-- measured after that session ended (`bytes`: allocated on the volume, as `du` counts;
-- `files`: every file, directory and link below the folder). Not a projection of the log: a
-- measurement, replaced by a later one.
CREATE TABLE recorder.folder_usage (
    owner       uuid        NOT NULL,
    folder      text        NOT NULL,
    volume      text        NOT NULL,
    bytes       bigint      NOT NULL,
    files       bigint      NOT NULL,
    measured_at timestamptz NOT NULL,
    agent_id    text        NOT NULL,
    PRIMARY KEY (owner, folder)
);
GRANT SELECT, INSERT, UPDATE, DELETE ON recorder.folder_usage TO berth_service;
