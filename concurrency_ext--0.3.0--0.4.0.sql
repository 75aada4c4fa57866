-- generated from src/sql/concurrency_ext--0.3.0--0.4.0/ by make upgrade-scripts: edit its parts and the install parts its INSTALL_PARTS names
\echo Use "ALTER EXTENSION concurrency_ext UPDATE" to load this file. \quit
-- ---------------------------------------------------------------------------
-- concurrency_ext 0.3.0 -> 0.4.0: the parts of src/sql/concurrency_ext--0.3.0--0.4.0/
-- (what turns 0.3.0's objects and data into 0.4.0's) and the install parts
-- that its INSTALL_PARTS names (objects new in 0.4.0, defined once), applied
-- in the order of their file names. Every part must keep the data of a live
-- 0.3.0 installation (local and distributed queues with leased, scheduled
-- and dead tasks, keys, permissions, schedules, dependencies, registered
-- subsystems, lock history), and the result must equal a fresh install
-- (scripts/upgrade-check.sh).
-- ---------------------------------------------------------------------------
-- ---------------------------------------------------------------------------
-- concurrency.lock_tree (0.4.0: an install part of its own, CREATE OR REPLACE,
-- so that the update from 0.3.0 takes it as it is).
--
-- The action: for a root, what ends its transaction or statement; for a
-- session that holds others up only by its place in the lock queue (a DDL
-- waiting behind an idle or prepared transaction, with readers queued behind
-- it), cancelling its statement — but only where that frees someone: a
-- session waits for it and for nobody else. The readers then go on at once
-- and the root keeps its transaction (a DDL's xid says nothing here: ALTER
-- TABLE has one while it waits). A waiting UPDATE queued behind another on
-- the same row gets no action: the sessions behind it also wait for the
-- first, and cancelling it would lose its write and free nobody. Only for
-- sessions whose state you may see. The root's own action stays.
-- ---------------------------------------------------------------------------
CREATE OR REPLACE VIEW concurrency.lock_tree AS
WITH nodes AS MATERIALIZED (
    SELECT * FROM concurrency.lock_tree_nodes()
), activity AS MATERIALIZED (
    SELECT s.pid, s.usesysid, s.application_name, s.client_addr, s.state, s.query, s.xact_start
      FROM pg_catalog.pg_stat_get_activity(NULL) s
)
SELECT t.pid,
       pg_catalog.pg_get_userbyid(COALESCE(a.usesysid, p.ownerid)) AS usename,
       a.application_name,
       a.client_addr,
       t.root_pid,
       t.depth,
       t.path,
       t.blocked_by,
       t.blocks_direct,
       t.blocks_total,
       t.in_cycle,
       CASE WHEN t.xid IS NOT NULL THEN 'prepared' ELSE a.state END AS state,
       a.query,
       t.snapshot_at - t.waiting_since AS waited,
       t.snapshot_at - COALESCE(a.xact_start, p.prepared) AS xact_age,
       CASE WHEN t.depth = 0 THEN
           CASE WHEN t.xid IS NOT NULL THEN pg_catalog.format('ROLLBACK PREPARED %L', p.gid)
                WHEN a.state IN ('active', 'fastpath function call')
                    THEN pg_catalog.format('SELECT pg_cancel_backend(%s)', t.pid)
                WHEN a.state IN ('idle in transaction', 'idle in transaction (aborted)', 'idle')
                    THEN pg_catalog.format('SELECT pg_terminate_backend(%s)', t.pid)
           END
            WHEN t.blocks_only_by_queue AND t.xid IS NULL AND a.state IS NOT NULL
                 AND (t.root_pid OPERATOR(pg_catalog.=) 0
                      OR r.state IN ('idle in transaction', 'idle in transaction (aborted)'))
                 AND EXISTS (SELECT FROM nodes w WHERE w.blocked_by OPERATOR(pg_catalog.=) ARRAY[t.pid])
                THEN pg_catalog.format('SELECT pg_cancel_backend(%s)', t.pid)
       END AS action,
       p.gid,
       t.snapshot_at
  FROM nodes t
  LEFT JOIN activity a ON a.pid OPERATOR(pg_catalog.=) t.pid AND t.xid IS NULL
  LEFT JOIN activity r ON r.pid OPERATOR(pg_catalog.=) t.root_pid
  LEFT JOIN pg_catalog.pg_prepared_xact() p ON p.transaction OPERATOR(pg_catalog.=) t.xid
 ORDER BY t.ord;
COMMENT ON VIEW concurrency.lock_tree IS
    'every session in a wait chain with its user, application and client, its root blocker, depth, path and transitive blocked count, and the statement that frees the chain (never executed): for roots, and for a DDL that holds readers up behind an idle or prepared root only by its place in the lock queue, where cancelling it frees them';
GRANT SELECT ON concurrency.lock_tree TO PUBLIC;
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
CREATE TABLE concurrency.counter (
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
CREATE TABLE concurrency.counter_slot (
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
CREATE TABLE concurrency.counter_permission (
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

CREATE FUNCTION concurrency.create_counter(name text, slots integer DEFAULT 16,
                                           min_value numeric DEFAULT NULL, max_value numeric DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_create_counter';
COMMENT ON FUNCTION concurrency.create_counter(text, integer, numeric, numeric) IS
    'creates a counter of value 0 split into slots rows, optionally bounded (min_value <= 0 <= max_value); the caller owns it';
-- Creating counters is for roles an administrator chose.
REVOKE EXECUTE ON FUNCTION concurrency.create_counter(text, integer, numeric, numeric) FROM PUBLIC;

CREATE FUNCTION concurrency.drop_counter(name text)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_drop_counter';
COMMENT ON FUNCTION concurrency.drop_counter(text) IS
    'drops a counter with its value and permissions; for its owner';

CREATE FUNCTION concurrency.alter_counter(name text, slots integer)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_alter_counter';
COMMENT ON FUNCTION concurrency.alter_counter(text, integer) IS
    'changes the number of slots of a counter, keeping its value exactly; for its owner';

CREATE FUNCTION concurrency.compact_counter(name text)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_compact_counter';
COMMENT ON FUNCTION concurrency.compact_counter(text) IS
    'folds a counter''s slots back (into slot 0, or spread evenly within its bounds), keeping its value exactly; for its owner';

CREATE FUNCTION concurrency.counter_add(name text, delta numeric)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_counter_add';
COMMENT ON FUNCTION concurrency.counter_add(text, numeric) IS
    'adds delta to a counter in the caller''s transaction, on a slot nobody holds; a bound it would cross raises 23514 and changes nothing; needs use';

CREATE FUNCTION concurrency.counter_value(name text)
    RETURNS numeric
    LANGUAGE c STABLE
    AS 'MODULE_PATHNAME', 'concurrency_counter_value';
COMMENT ON FUNCTION concurrency.counter_value(text) IS
    'the value of a counter as of the caller''s snapshot (the sum of its slots); needs read or use';

CREATE FUNCTION concurrency.grant_counter(counter text, role name, permission text)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_grant_counter';
COMMENT ON FUNCTION concurrency.grant_counter(text, name, text) IS
    'grants use (add and read) or read on a counter to a role (''public'': everyone); for its owner';

CREATE FUNCTION concurrency.revoke_counter(counter text, role name, permission text)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_revoke_counter';
COMMENT ON FUNCTION concurrency.revoke_counter(text, name, text) IS
    'revokes use or read on a counter from a role (''public'': everyone); for its owner';

-- The counters the current user may read, with their values as of the
-- statement's snapshot. The view runs as its owner (the extension's), and
-- shows only rows whose counter the caller holds read or use on.
CREATE VIEW concurrency.counters WITH (security_barrier) AS
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
