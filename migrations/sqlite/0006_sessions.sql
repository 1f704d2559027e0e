-- Sign-in sessions of built-in users (docs/AUTH.md, "Sessions"), kept in the database
-- so that every replica sees a sign-out, and a session can be ended server-side.
-- Times are Unix seconds. The cookie holds a random id; only its SHA-256 is stored,
-- so a copy of this table signs nobody in.
CREATE TABLE IF NOT EXISTS idemwatch_sessions (
    id_sha256 TEXT NOT NULL,
    user_name TEXT NOT NULL,
    -- HMAC of the user's password hash at sign-in: a changed password ends the session.
    password_tag TEXT NOT NULL,
    -- SHA-256 of the CSRF cookie issued at sign-in: the session's forms carry a token
    -- bound to it, so a CSRF cookie planted later (a sibling subdomain) forges nothing.
    csrf_sha256 TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL,
    -- Absolute end (created_at + --session-lifetime), whatever the activity.
    expires_at BIGINT NOT NULL,
    CONSTRAINT idemwatch_sessions_pkey PRIMARY KEY (id_sha256)
);
-- Ending a user's sessions; sweeping ended ones.
CREATE INDEX IF NOT EXISTS idemwatch_sessions_user ON idemwatch_sessions (user_name);
CREATE INDEX IF NOT EXISTS idemwatch_sessions_expires ON idemwatch_sessions (expires_at);
