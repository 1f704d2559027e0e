-- Tamper evidence beyond the per-key chain (docs/EXPORT.md): signed checkpoints over
-- the log of key heads, the head log's leaves, and retention's pruning receipts.

-- One row per signed checkpoint. The signed body is (version, seq, created_at,
-- tree_size, root_hash, prev_hash, leaves_added, key_id); frontier and the two
-- watermarks are bookkeeping for the next checkpoint, not evidence.
CREATE TABLE evidence_checkpoints (
    seq          bigint      NOT NULL,
    version      integer     NOT NULL,
    created_at   timestamptz NOT NULL,
    tree_size    bigint      NOT NULL,
    root_hash    text        NOT NULL,
    prev_hash    text        NOT NULL,
    leaves_added bigint      NOT NULL,
    key_id       text        NOT NULL,
    signature    text        NOT NULL,
    hash         text        NOT NULL,
    frontier     jsonb       NOT NULL,
    tail_txid    bigint      NOT NULL,
    tail_id      bigint      NOT NULL,
    pruned_id    bigint      NOT NULL,
    CONSTRAINT evidence_checkpoints_pkey PRIMARY KEY (seq),
    CONSTRAINT evidence_checkpoints_seq_positive CHECK (seq > 0)
);

-- The head log: leaf idx (0-based) of the Merkle tree the checkpoints sign.
CREATE TABLE evidence_leaves (
    idx            bigint  NOT NULL,
    checkpoint_seq bigint  NOT NULL,
    key            text    NOT NULL,
    log_seq        bigint  NOT NULL,
    log_hash       text    NOT NULL,
    pruned         boolean NOT NULL,
    CONSTRAINT evidence_leaves_pkey PRIMARY KEY (idx)
);
CREATE INDEX evidence_leaves_key ON evidence_leaves (key, idx);

-- What retention deleted, written in the pruning transaction: the receipt that
-- tells a pruned key from a deleted one until the next checkpoint records it.
CREATE TABLE evidence_pruned (
    id        bigint      GENERATED ALWAYS AS IDENTITY,
    key       text        NOT NULL,
    log_seq   bigint      NOT NULL,
    log_hash  text        NOT NULL,
    status    text        NOT NULL,
    pruned_at timestamptz NOT NULL,
    CONSTRAINT evidence_pruned_pkey PRIMARY KEY (id)
);
CREATE INDEX evidence_pruned_key ON evidence_pruned (key);
