-- postroom schema, version 4: every folder setting lives on its row (the persona included),
-- changes to folders are audited, and runs are listed per folder.

ALTER TABLE folders ADD COLUMN budget_per_day REAL;
ALTER TABLE folders ADD COLUMN updated_at TEXT;
-- The (mtime, size) of AGENT.md when the row and the file last agreed. NULL: the file has not
-- been read into the row yet, so the server imports every existing AGENT.md (persona and front
-- matter) once, when it starts.
ALTER TABLE folders ADD COLUMN file_stamp TEXT;
UPDATE folders SET updated_at = created_at;

CREATE TABLE folder_audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    folder TEXT NOT NULL,
    before TEXT,
    after TEXT
);
CREATE INDEX idx_folder_audit_folder ON folder_audit(folder, id);

CREATE INDEX idx_runs_folder ON runs(folder, id);
