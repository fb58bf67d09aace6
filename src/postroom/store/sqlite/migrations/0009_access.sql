-- ROUTING §8: who may talk to the agents, and the folders' daily budgets.
--
-- principals: sender globs with a role (owner, member, blocked). pairing_requests: the one-time
-- codes offered to strangers' direct messages; a denied request stays (status 'denied') until it
-- expires, so the same chat is not offered another code within the TTL. access_audit: every
-- change to either, with its actor. budget_notices: when a chat was last told that a folder has
-- used the day's budget (one notice per hour).

CREATE TABLE principals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    pattern TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    note TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    created_by TEXT NOT NULL DEFAULT ''
);

CREATE TABLE pairing_requests (
    code TEXT PRIMARY KEY,
    platform TEXT NOT NULL,
    chat_jid TEXT NOT NULL,
    sender TEXT NOT NULL,
    sender_name TEXT,
    status TEXT NOT NULL DEFAULT 'pending',
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL
);
CREATE INDEX idx_pairing_chat ON pairing_requests(chat_jid, expires_at);
CREATE INDEX idx_pairing_platform ON pairing_requests(platform, status, expires_at);

CREATE TABLE access_audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time TEXT NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    principal_id INTEGER,
    code TEXT,
    before TEXT,
    after TEXT
);

CREATE TABLE budget_notices (
    chat_jid TEXT NOT NULL,
    folder TEXT NOT NULL,
    notified_at TEXT NOT NULL,
    PRIMARY KEY (chat_jid, folder)
);
