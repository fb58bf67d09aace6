-- postroom schema, version 6: run records grow with new content only (PIPELINE §2).
--
-- A run used to store its whole request, so a conversation of n turns stored its history n
-- times. Each distinct part of a request — the system prompt, each rendered message, the tool
-- list — is now stored once in run_parts, found by its SHA-256, and a run keeps the ids of its
-- parts in order: {"system": id, "messages": [id, ...], "tools": id}.
-- sha256() is the SQL function the store registers on its migration connection.

CREATE TABLE run_parts (
    id INTEGER PRIMARY KEY,
    sha256 BLOB NOT NULL UNIQUE,
    body TEXT NOT NULL
);

INSERT OR IGNORE INTO run_parts (sha256, body) SELECT sha256(system), system FROM runs;
INSERT OR IGNORE INTO run_parts (sha256, body)
    SELECT sha256(message.value), message.value
    FROM runs, json_each(runs.messages) AS message
    ORDER BY runs.id, message.key;
INSERT OR IGNORE INTO run_parts (sha256, body) SELECT sha256(tools), tools FROM runs;

ALTER TABLE runs ADD COLUMN parts TEXT NOT NULL DEFAULT '{}';

UPDATE runs SET parts = json_object(
    'system', (SELECT id FROM run_parts WHERE sha256 = sha256(runs.system)),
    'messages', json((
        SELECT json_group_array(id) FROM (
            SELECT part.id AS id
            FROM json_each(runs.messages) AS message
            JOIN run_parts AS part ON part.sha256 = sha256(message.value)
            ORDER BY message.key
        )
    )),
    'tools', (SELECT id FROM run_parts WHERE sha256 = sha256(runs.tools))
);

ALTER TABLE runs DROP COLUMN system;
ALTER TABLE runs DROP COLUMN messages;
ALTER TABLE runs DROP COLUMN tools;
