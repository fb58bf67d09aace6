-- postroom schema, version 1: messages, chats, routes and their audit log, folders,
-- engagements, conversations, drops. Times are ISO-8601 UTC text of fixed width
-- (2026-01-02T03:04:05.000006Z), so they sort and compare as text.

CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO meta (key, value) VALUES ('catalog_version', '0');

-- MESSAGES §3: the seed table exactly, plus the extension columns.
CREATE TABLE messages (
    id TEXT,
    chat_jid TEXT,
    sender TEXT,
    sender_name TEXT,
    content TEXT,
    timestamp TEXT,
    is_from_me INTEGER,
    message_type TEXT NOT NULL DEFAULT 'user',
    metadata TEXT,
    seq INTEGER NOT NULL,
    verb TEXT NOT NULL DEFAULT 'message',
    topic TEXT NOT NULL DEFAULT '',
    reply_to TEXT,
    platform_id TEXT,
    routed_to TEXT,
    observed INTEGER NOT NULL DEFAULT 0,
    conversation_id INTEGER,
    run_id INTEGER,
    compacted INTEGER NOT NULL DEFAULT 0,
    decision TEXT,
    PRIMARY KEY (id, chat_jid)
);
CREATE INDEX idx_messages_by_chat ON messages(chat_jid, timestamp);
CREATE UNIQUE INDEX idx_messages_seq ON messages(seq);
CREATE INDEX idx_messages_chat_seq ON messages(chat_jid, seq);
CREATE INDEX idx_messages_routed_seq ON messages(routed_to, seq) WHERE routed_to IS NOT NULL;
CREATE INDEX idx_messages_platform_id ON messages(chat_jid, platform_id)
    WHERE platform_id IS NOT NULL;
CREATE INDEX idx_messages_conversation ON messages(conversation_id, seq)
    WHERE conversation_id IS NOT NULL;

CREATE TABLE chats (
    chat_jid TEXT PRIMARY KEY,
    sticky_group TEXT,
    sticky_topic TEXT,
    missing_notice_at TEXT,
    updated_at TEXT NOT NULL
);

CREATE TABLE engagements (
    chat_jid TEXT NOT NULL,
    topic TEXT NOT NULL DEFAULT '',
    folder TEXT NOT NULL,
    until TEXT NOT NULL,
    PRIMARY KEY (chat_jid, topic)
);

-- AUTOINCREMENT: a route id is never reused, so the audit log and explanations stay true.
CREATE TABLE routes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    seq INTEGER NOT NULL,
    match TEXT NOT NULL DEFAULT '',
    target TEXT NOT NULL,
    created_at TEXT NOT NULL,
    created_by TEXT NOT NULL DEFAULT ''
);

CREATE TABLE route_audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    route_id INTEGER,
    before TEXT,
    after TEXT
);

CREATE TABLE folders (
    path TEXT PRIMARY KEY,
    parent TEXT REFERENCES folders(path) ON DELETE RESTRICT,
    persona TEXT,
    provider TEXT,
    model TEXT,
    engagement_ttl_s INTEGER,
    busy_policy TEXT,
    session TEXT,
    role TEXT,
    tools TEXT,
    mirror TEXT,
    inherits INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    created_by TEXT NOT NULL DEFAULT ''
);

-- One row per generation: /new starts the next one, with an empty history.
CREATE TABLE conversations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    folder TEXT NOT NULL,
    topic TEXT NOT NULL DEFAULT '',
    chat_jid TEXT,
    generation INTEGER NOT NULL DEFAULT 1,
    token_estimate INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL
);
CREATE UNIQUE INDEX idx_conversations_key
    ON conversations(folder, topic, COALESCE(chat_jid, ''), generation);

-- ROUTING §3.3: no content column on purpose.
CREATE TABLE drops (
    id TEXT NOT NULL,
    chat_jid TEXT NOT NULL,
    time TEXT NOT NULL,
    sender TEXT NOT NULL,
    verb TEXT NOT NULL,
    reason TEXT NOT NULL,
    PRIMARY KEY (id, chat_jid)
);
CREATE INDEX idx_drops_time ON drops(time);
