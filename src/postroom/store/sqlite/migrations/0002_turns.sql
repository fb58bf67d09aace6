-- postroom schema, version 2: the turn queue, the outbox, run records, scheduled tasks.

-- Observed rows a turn's window passed over stay out of every context for good (MESSAGES §4).
ALTER TABLE messages ADD COLUMN skipped INTEGER NOT NULL DEFAULT 0;
CREATE INDEX idx_messages_observed_pending ON messages(routed_to, chat_jid, seq)
    WHERE observed = 1 AND conversation_id IS NULL AND skipped = 0;

-- PIPELINE §2: one row per turn. A conversation has at most one running turn and at most one
-- queued turn (later messages join it), so claiming in (priority, id) order keeps each
-- conversation's arrival order.
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id),
    folder TEXT NOT NULL,
    chat_jid TEXT NOT NULL,
    topic TEXT NOT NULL DEFAULT '',
    kind TEXT NOT NULL DEFAULT 'turn',
    task_id INTEGER,
    priority INTEGER NOT NULL DEFAULT 5,
    status TEXT NOT NULL DEFAULT 'queued',
    attempts INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL DEFAULT 3,
    run_at TEXT NOT NULL,
    lease_until TEXT,
    lease_owner TEXT,
    lease_token TEXT,
    boot_id TEXT,
    last_error TEXT,
    answer_id TEXT,
    created_at TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT
);
CREATE INDEX idx_jobs_queued ON jobs(priority, id) WHERE status = 'queued';
CREATE INDEX idx_jobs_conversation ON jobs(conversation_id, status);
CREATE INDEX idx_jobs_running ON jobs(lease_until) WHERE status = 'running';
CREATE INDEX idx_jobs_task ON jobs(task_id, status) WHERE task_id IS NOT NULL;
CREATE INDEX idx_jobs_status ON jobs(status, id);

-- Which inbound messages a turn answers: every fired message by exactly one turn.
CREATE TABLE job_messages (
    message_id TEXT NOT NULL,
    chat_jid TEXT NOT NULL,
    job_id INTEGER NOT NULL REFERENCES jobs(id),
    PRIMARY KEY (message_id, chat_jid)
);
CREATE INDEX idx_job_messages_job ON job_messages(job_id);

-- PIPELINE §3: one row per (stored message, target chat, chunk); sent once, in order per chat.
CREATE TABLE deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL,
    message_chat_jid TEXT NOT NULL,
    chat_jid TEXT NOT NULL,
    chunk INTEGER NOT NULL,
    chunks INTEGER NOT NULL,
    content TEXT NOT NULL,
    kind TEXT NOT NULL,
    message_type TEXT NOT NULL,
    folder TEXT,
    topic TEXT NOT NULL DEFAULT '',
    reply_to TEXT,
    engage INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    next_try TEXT NOT NULL,
    last_error TEXT,
    platform_message_id TEXT,
    created_at TEXT NOT NULL,
    sent_at TEXT,
    UNIQUE (message_id, message_chat_jid, chat_jid, chunk)
);
CREATE INDEX idx_deliveries_pending ON deliveries(chat_jid, id) WHERE status = 'pending';
CREATE INDEX idx_deliveries_due ON deliveries(next_try) WHERE status = 'pending';
CREATE INDEX idx_deliveries_platform_id ON deliveries(chat_jid, platform_message_id)
    WHERE platform_message_id IS NOT NULL;

-- MESSAGES §4: the exact request and outcome of every run.
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id INTEGER NOT NULL,
    folder TEXT NOT NULL,
    conversation_id INTEGER,
    provider TEXT NOT NULL,
    model TEXT,
    account TEXT,
    system TEXT NOT NULL,
    messages TEXT NOT NULL,
    tools TEXT NOT NULL DEFAULT '[]',
    output_raw TEXT,
    output TEXT,
    usage TEXT,
    cost REAL,
    duration_ms INTEGER,
    outcome TEXT NOT NULL,
    error TEXT,
    started_at TEXT NOT NULL,
    finished_at TEXT
);
CREATE INDEX idx_runs_job ON runs(job_id);

-- PIPELINE §7.
CREATE TABLE tasks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    folder TEXT NOT NULL,
    chat_jid TEXT NOT NULL,
    schedule TEXT NOT NULL,
    tz TEXT,
    prompt TEXT NOT NULL,
    enabled INTEGER NOT NULL DEFAULT 1,
    next_run TEXT,
    last_run TEXT,
    last_status TEXT,
    created_at TEXT NOT NULL,
    created_by TEXT NOT NULL DEFAULT ''
);
CREATE INDEX idx_tasks_due ON tasks(next_run) WHERE enabled = 1;
