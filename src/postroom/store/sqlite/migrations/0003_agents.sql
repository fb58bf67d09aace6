-- postroom schema, version 3: memory and state per folder, compactions, delegation depth,
-- what each model call was for.

CREATE TABLE memory_facts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    folder TEXT NOT NULL,
    category TEXT NOT NULL,
    fact TEXT NOT NULL,
    -- lowercased words, for spotting near-duplicates without a model
    normalized TEXT NOT NULL,
    created_at TEXT NOT NULL,
    run_id INTEGER
);
CREATE INDEX idx_memory_facts_folder ON memory_facts(folder, category);

-- PIPELINE §6: facts are searchable (FTS5), kept in step with the table by triggers.
CREATE VIRTUAL TABLE memory_fts USING fts5(
    fact, content = 'memory_facts', content_rowid = 'id', tokenize = 'porter unicode61'
);
CREATE TRIGGER memory_facts_ai AFTER INSERT ON memory_facts BEGIN
    INSERT INTO memory_fts(rowid, fact) VALUES (new.id, new.fact);
END;
CREATE TRIGGER memory_facts_ad AFTER DELETE ON memory_facts BEGIN
    INSERT INTO memory_fts(memory_fts, rowid, fact) VALUES ('delete', old.id, old.fact);
END;

CREATE TABLE memory_state (
    folder TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (folder, key)
);

-- Compacted messages are marked, never deleted: the summary stands in for them in contexts.
CREATE TABLE compactions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL,
    summary TEXT NOT NULL,
    up_to_seq INTEGER NOT NULL,
    messages_before INTEGER NOT NULL,
    messages_after INTEGER NOT NULL,
    tokens_saved INTEGER NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX idx_compactions_conversation ON compactions(conversation_id, id);

ALTER TABLE jobs ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN purpose TEXT NOT NULL DEFAULT 'turn';
CREATE INDEX idx_runs_started ON runs(started_at);
