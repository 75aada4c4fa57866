-- ---------------------------------------------------------------------------
-- Named advisory locks: the registry of subsystems and their fixed keys.
-- ---------------------------------------------------------------------------

-- One row per subsystem. `key` is the bigint advisory-lock key of the
-- subsystem lock itself (exactly pg_advisory_lock(key)); `slot` is a small
-- number assigned at registration that identifies the subsystem's resource
-- locks in the lock manager (the 16-bit objsubid field of the advisory lock
-- tag, 16–65535: above PostgreSQL's 1 and 2 and Citus's 4–15).
CREATE TABLE concurrency.subsystem (
    name          text        PRIMARY KEY,
    key           bigint      NOT NULL UNIQUE,
    slot          integer     NOT NULL UNIQUE CHECK (slot BETWEEN 16 AND 65535),
    description   text,
    xact_only     boolean     NOT NULL DEFAULT false,
    registered_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    registered_by name        NOT NULL DEFAULT current_user
);
COMMENT ON TABLE concurrency.subsystem IS
    'registry of named advisory-lock subsystems and their fixed keys';
SELECT pg_catalog.pg_extension_config_dump('concurrency.subsystem', '');
GRANT SELECT ON concurrency.subsystem TO PUBLIC;
