-- postroom schema for PostgreSQL, version 2: a folder's skills (MESSAGES §4), and which of
-- them each run used (SQLite's migration 0007).

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

ALTER TABLE runs ADD COLUMN skills TEXT;
