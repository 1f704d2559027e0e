-- The root of each complete block of 1,024 head-log leaves (leaves 1024 * idx to
-- 1024 * idx + 1023), written by the checkpoint that completes the block. Such a block
-- is a node of every checkpoint's tree that holds it, so one key's inclusion proof
-- reads its block's leaves and these roots instead of the whole head log. Derived
-- from evidence_leaves and checked against the signed root before use: a missing or
-- wrong row costs speed (the export falls back to reading every leaf), never a proof.
CREATE TABLE evidence_blocks (
    idx  bigint NOT NULL,
    hash text   NOT NULL,
    CONSTRAINT evidence_blocks_pkey PRIMARY KEY (idx)
);
