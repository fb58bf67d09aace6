-- postroom schema, version 9: a folder's skills (MESSAGES §4), and which of them each run used.
--
-- A skill is a row — the source of truth — mirrored to DIR/folders/<path>/skills/<name>.md.
-- file_stamp is the (mtime, size) of that file when the row and the file last agreed, so an
-- edit a person makes to it is noticed with one stat and imported.

CREATE TABLE skills (
    folder TEXT NOT NULL REFERENCES folders(path) ON DELETE CASCADE,
    name TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    keywords TEXT NOT NULL DEFAULT '[]',
    body TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    file_stamp TEXT,
    PRIMARY KEY (folder, name)
);

-- The skills injected into a run, with their scores: [{name, folder, inherited_from, score,
-- chars}]; NULL for runs stored before skills existed.
ALTER TABLE runs ADD COLUMN skills TEXT;
