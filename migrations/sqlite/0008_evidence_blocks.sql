-- The root of each complete block of 1,024 head-log leaves; see the PostgreSQL
-- migration of the same name.
CREATE TABLE evidence_blocks (
    idx  INTEGER NOT NULL,
    hash TEXT    NOT NULL,
    CONSTRAINT evidence_blocks_pkey PRIMARY KEY (idx)
);
