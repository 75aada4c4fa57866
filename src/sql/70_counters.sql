-- ---------------------------------------------------------------------------
-- Counters (src/counters, docs/counters.md): one value that many transactions
-- change at once, split into slot rows so that writers take different rows
-- (SKIP LOCKED) instead of queueing on one. The value is the sum of the
-- slots. Optional bounds are never crossed (the escrow method): each slot
-- has a floor and a ceiling of its own, the floors sum to min_value and the
-- ceilings to max_value, and no slot ever leaves its range.
--
-- All three tables are extension configuration: pg_dump / pg_restore keep
-- them. Nobody but the extension's owner touches them directly; the
-- functions (SECURITY INVOKER, C) check the caller's permission and run
-- their statements as the tables' owner.
-- ---------------------------------------------------------------------------
CREATE TABLE IF NOT EXISTS concurrency.counter (
    name      text    PRIMARY KEY CHECK (name <> '' AND pg_catalog.length(name) <= 200),
    slots     integer NOT NULL CHECK (slots BETWEEN 1 AND 1024),
    min_value numeric,
    max_value numeric,
    owner     regrole NOT NULL,
    CHECK (min_value <= max_value)
);
COMMENT ON TABLE concurrency.counter IS
    'counters of concurrency_ext (create_counter, alter_counter, drop_counter); their values are in counter_slot';
SELECT pg_catalog.pg_extension_config_dump('concurrency.counter', '');

-- One row per slot. floor / ceiling: the slot's share of min_value /
-- max_value (NULL: no bound on that side); value stays between them.
CREATE TABLE IF NOT EXISTS concurrency.counter_slot (
    counter text    NOT NULL REFERENCES concurrency.counter (name) ON DELETE CASCADE,
    slot    integer NOT NULL CHECK (slot >= 0),
    value   numeric NOT NULL DEFAULT 0,
    floor   numeric,
    ceiling numeric,
    PRIMARY KEY (counter, slot),
    CHECK (value >= floor AND value <= ceiling)
);
COMMENT ON TABLE concurrency.counter_slot IS
    'the slots of each counter: its value is their sum; each slot stays between its floor and ceiling';
SELECT pg_catalog.pg_extension_config_dump('concurrency.counter_slot', '');

-- Who may use or read a counter besides its owner (and superusers): 'use'
-- adds and reads, 'read' reads. Grantee 0 (shown as '-') is PUBLIC.
CREATE TABLE IF NOT EXISTS concurrency.counter_permission (
    counter    text    NOT NULL REFERENCES concurrency.counter (name) ON DELETE CASCADE,
    grantee    regrole NOT NULL,
    permission text    NOT NULL CHECK (permission IN ('use', 'read')),
    PRIMARY KEY (counter, grantee, permission)
);
COMMENT ON TABLE concurrency.counter_permission IS
    'permissions on concurrency_ext counters (grantee - is PUBLIC); change them with grant_counter and revoke_counter';
SELECT pg_catalog.pg_extension_config_dump('concurrency.counter_permission',
    'WHERE grantee OPERATOR(pg_catalog.=) 0 OR EXISTS (SELECT FROM pg_catalog.pg_roles AS r '
    'WHERE r.oid OPERATOR(pg_catalog.=) grantee::pg_catalog.oid)');
-- Who holds what is no secret (as for queues); changing it goes through the functions.
GRANT SELECT ON concurrency.counter_permission TO PUBLIC;

CREATE OR REPLACE FUNCTION concurrency.create_counter(name text, slots integer DEFAULT 16,
                                           min_value numeric DEFAULT NULL, max_value numeric DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_create_counter';
COMMENT ON FUNCTION concurrency.create_counter(text, integer, numeric, numeric) IS
    'creates a counter of value 0 split into slots rows, optionally bounded (min_value <= 0 <= max_value); the caller owns it';
-- Creating counters is for roles an administrator chose.
REVOKE EXECUTE ON FUNCTION concurrency.create_counter(text, integer, numeric, numeric) FROM PUBLIC;

CREATE OR REPLACE FUNCTION concurrency.drop_counter(name text)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_drop_counter';
COMMENT ON FUNCTION concurrency.drop_counter(text) IS
    'drops a counter with its value and permissions; for its owner';

CREATE OR REPLACE FUNCTION concurrency.alter_counter(name text, slots integer)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_alter_counter';
COMMENT ON FUNCTION concurrency.alter_counter(text, integer) IS
    'changes the number of slots of a counter, keeping its value exactly; for its owner';

CREATE OR REPLACE FUNCTION concurrency.compact_counter(name text)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_compact_counter';
COMMENT ON FUNCTION concurrency.compact_counter(text) IS
    'folds a counter''s slots back (into slot 0, or spread evenly within its bounds), keeping its value exactly; for its owner';

CREATE OR REPLACE FUNCTION concurrency.counter_add(name text, delta numeric)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_counter_add';
COMMENT ON FUNCTION concurrency.counter_add(text, numeric) IS
    'adds delta to a counter in the caller''s transaction, on a slot nobody holds; a bound it would cross raises 23514 and changes nothing; needs use';

CREATE OR REPLACE FUNCTION concurrency.counter_value(name text)
    RETURNS numeric
    LANGUAGE c STABLE
    AS 'MODULE_PATHNAME', 'concurrency_counter_value';
COMMENT ON FUNCTION concurrency.counter_value(text) IS
    'the value of a counter as of the caller''s snapshot (the sum of its slots); needs read or use';

CREATE OR REPLACE FUNCTION concurrency.grant_counter(counter text, role name, permission text)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_grant_counter';
COMMENT ON FUNCTION concurrency.grant_counter(text, name, text) IS
    'grants use (add and read) or read on a counter to a role (''public'': everyone); for its owner';

CREATE OR REPLACE FUNCTION concurrency.revoke_counter(counter text, role name, permission text)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_revoke_counter';
COMMENT ON FUNCTION concurrency.revoke_counter(text, name, text) IS
    'revokes use or read on a counter from a role (''public'': everyone); for its owner';

-- The counters the current user may read, with their values as of the
-- statement's snapshot. The view runs as its owner (the extension's), and
-- shows only rows whose counter the caller holds read or use on.
CREATE OR REPLACE VIEW concurrency.counters WITH (security_barrier) AS
SELECT c.name,
       (SELECT pg_catalog.sum(s.value) FROM concurrency.counter_slot AS s
         WHERE s.counter OPERATOR(pg_catalog.=) c.name) AS value,
       c.slots, c.min_value, c.max_value
  FROM concurrency.counter AS c
 WHERE pg_catalog.pg_has_role(CURRENT_USER, c.owner::pg_catalog.oid, 'USAGE')
    OR EXISTS (SELECT FROM concurrency.counter_permission AS p
                WHERE p.counter OPERATOR(pg_catalog.=) c.name
                  AND (p.grantee::pg_catalog.oid OPERATOR(pg_catalog.=) 0
                       OR pg_catalog.pg_has_role(CURRENT_USER, p.grantee::pg_catalog.oid, 'USAGE')));
COMMENT ON VIEW concurrency.counters IS
    'counters the current user may read: name, value (as of the statement''s snapshot), slots, bounds';
GRANT SELECT ON concurrency.counters TO PUBLIC;
