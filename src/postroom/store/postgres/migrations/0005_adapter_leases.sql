-- postroom schema for PostgreSQL, version 5: which node runs each single-connection adapter
-- (PIPELINE §9). A node renews its row while the adapter runs; another node takes a row whose
-- lease ran out.

CREATE TABLE adapter_leases (
    adapter TEXT PRIMARY KEY,
    node_id TEXT NOT NULL,
    lease_until TEXT NOT NULL
);
