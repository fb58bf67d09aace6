-- postroom schema, version 8: attachments stored once, content-addressed (MESSAGES §4).
--
-- Adapters used to keep a fetched photo or voice note as base64 inside the message's metadata,
-- so a picture sent twice was stored twice and every read of a history carried its bytes. The
-- bytes now live in blobs, one row per distinct file found by its SHA-256 (hex), and a message's
-- metadata keeps only {kind, mime, name, size, sha256} for each attachment. message_blobs says
-- which chat holds which blob: a web visitor may fetch the files of their own chat only.
-- base64_bytes() and sha256_hex() are the SQL functions the store registers on its migration
-- connection.

CREATE TABLE blobs (
    sha256 TEXT PRIMARY KEY,
    mime TEXT NOT NULL,
    size INTEGER NOT NULL,
    data BLOB NOT NULL,
    created_at TEXT NOT NULL
);

CREATE TABLE message_blobs (
    chat_jid TEXT NOT NULL,
    sha256 TEXT NOT NULL REFERENCES blobs (sha256),
    message_id TEXT NOT NULL,
    PRIMARY KEY (chat_jid, sha256, message_id)
) WITHOUT ROWID;

CREATE TEMP TABLE inline_attachments AS
    SELECT
        m.id AS message_id,
        m.chat_jid AS chat_jid,
        a.key AS position,
        a.value AS value,
        base64_bytes(json_extract(a.value, '$.data')) AS data
    FROM messages AS m, json_each(m.metadata, '$.attachments') AS a
    WHERE json_type(m.metadata, '$.attachments') = 'array' AND a.type = 'object';

INSERT OR IGNORE INTO blobs (sha256, mime, size, data, created_at)
    SELECT sha256_hex(data), COALESCE(json_extract(value, '$.mime'), ''), length(data), data,
        strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')
    FROM inline_attachments
    WHERE data IS NOT NULL
    ORDER BY message_id, chat_jid, position;

INSERT OR IGNORE INTO message_blobs (chat_jid, sha256, message_id)
    SELECT chat_jid, sha256_hex(data), message_id FROM inline_attachments WHERE data IS NOT NULL;

UPDATE messages SET metadata = json_set(metadata, '$.attachments', (
    SELECT json_group_array(json(slim)) FROM (
        SELECT CASE WHEN data IS NULL THEN json_object(
                'kind', COALESCE(json_extract(value, '$.kind'), 'file'),
                'mime', COALESCE(json_extract(value, '$.mime'), ''),
                'name', COALESCE(json_extract(value, '$.name'), ''),
                'size', COALESCE(json_extract(value, '$.size'), 0)
            ) ELSE json_object(
                'kind', COALESCE(json_extract(value, '$.kind'), 'file'),
                'mime', COALESCE(json_extract(value, '$.mime'), ''),
                'name', COALESCE(json_extract(value, '$.name'), ''),
                'size', length(data),
                'sha256', sha256_hex(data)
            ) END AS slim
        FROM inline_attachments AS i
        WHERE i.message_id = messages.id AND i.chat_jid = messages.chat_jid
        ORDER BY i.position
    )
))
WHERE EXISTS (
    SELECT 1 FROM inline_attachments AS i
    WHERE i.message_id = messages.id AND i.chat_jid = messages.chat_jid
);

DROP TABLE inline_attachments;
