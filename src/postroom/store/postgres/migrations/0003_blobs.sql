-- postroom schema for PostgreSQL, version 3: attachments stored once, content-addressed
-- (MESSAGES §4; SQLite's migration 0008), and SQLite's two-argument MAX for the statements
-- that keep a conversation's token estimate from going below zero.

CREATE TABLE blobs (
    sha256 TEXT PRIMARY KEY,
    mime TEXT NOT NULL,
    size BIGINT NOT NULL,
    data BYTEA NOT NULL,
    created_at TEXT NOT NULL
);

CREATE TABLE message_blobs (
    chat_jid TEXT NOT NULL,
    sha256 TEXT NOT NULL REFERENCES blobs (sha256),
    message_id TEXT NOT NULL,
    PRIMARY KEY (chat_jid, sha256, message_id)
);

CREATE FUNCTION max(a BIGINT, b BIGINT) RETURNS BIGINT
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN GREATEST(a, b);
