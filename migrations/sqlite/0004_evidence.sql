-- Tamper evidence beyond the per-key chain (docs/EXPORT.md): signed checkpoints over
-- the log of key heads, the head log's leaves, and retention's pruning receipts.
-- Same tables as PostgreSQL; times are RFC 3339 text, JSON is text.

CREATE TABLE evidence_checkpoints (
    seq          INTEGER NOT NULL,
    version      INTEGER NOT NULL,
    created_at   TEXT    NOT NULL,
    tree_size    INTEGER NOT NULL,
    root_hash    TEXT    NOT NULL,
    prev_hash    TEXT    NOT NULL,
    leaves_added INTEGER NOT NULL,
    key_id       TEXT    NOT NULL,
    signature    TEXT    NOT NULL,
    hash         TEXT    NOT NULL,
    frontier     TEXT    NOT NULL,
    tail_txid    INTEGER NOT NULL,
    tail_id      INTEGER NOT NULL,
    pruned_id    INTEGER NOT NULL,
    CONSTRAINT evidence_checkpoints_pkey PRIMARY KEY (seq),
    CONSTRAINT evidence_checkpoints_seq_positive CHECK (seq > 0)
);

CREATE TABLE evidence_leaves (
    idx            INTEGER NOT NULL,
    checkpoint_seq INTEGER NOT NULL,
    key            TEXT    NOT NULL,
    log_seq        INTEGER NOT NULL,
    log_hash       TEXT    NOT NULL,
    pruned         BOOLEAN NOT NULL,
    CONSTRAINT evidence_leaves_pkey PRIMARY KEY (idx)
);
CREATE INDEX evidence_leaves_key ON evidence_leaves (key, idx);

CREATE TABLE evidence_pruned (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    key       TEXT    NOT NULL,
    log_seq   INTEGER NOT NULL,
    log_hash  TEXT    NOT NULL,
    status    TEXT    NOT NULL,
    pruned_at TEXT    NOT NULL
);
CREATE INDEX evidence_pruned_key ON evidence_pruned (key);
