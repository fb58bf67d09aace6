-- Named API and MCP tokens besides [api] token. Only a hash of each secret is kept: the
-- secret is shown once, when the token is made, and a stolen database holds no usable token.
CREATE TABLE tokens (
    name TEXT PRIMARY KEY,
    scope TEXT NOT NULL,
    folder TEXT,
    secret_hash TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    created_by TEXT NOT NULL DEFAULT ''
);
