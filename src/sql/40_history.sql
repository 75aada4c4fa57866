-- ---------------------------------------------------------------------------
-- Lock-wait history: episodes "one root blocker blocking at least one
-- session", sampled by a background worker into a shared-memory ring. Needs
-- concurrency_ext in shared_preload_libraries; without it these raise 55000.
-- New in 0.2.0: the update from 0.1.0 takes this part as it is
-- (src/sql/concurrency_ext--0.1.0--0.2.0/INSTALL_PARTS).
-- ---------------------------------------------------------------------------

-- The episodes in the ring, oldest first, masked for the current user.
CREATE FUNCTION concurrency.lock_history_episodes(
    OUT episode_id bigint, OUT database name,
    OUT started_at timestamptz, OUT ended_at timestamptz, OUT duration interval,
    OUT root_pid integer, OUT root_user name, OUT root_application text,
    OUT root_client_addr inet, OUT root_state text, OUT root_query text,
    OUT root_xact_start timestamptz,
    OUT max_waiters integer, OUT max_depth integer, OUT longest_wait interval,
    OUT waiter_seconds double precision,
    OUT locked_objects text[], OUT waiting_queries text[],
    OUT ended_by text, OUT in_cycle boolean)
    RETURNS SETOF record
    LANGUAGE c VOLATILE PARALLEL RESTRICTED
    AS 'MODULE_PATHNAME', 'concurrency_lock_history_episodes';
COMMENT ON FUNCTION concurrency.lock_history_episodes() IS
    'the lock-wait episodes kept in shared memory, oldest first; query text masked as in pg_stat_activity';

CREATE VIEW concurrency.lock_history AS
SELECT h.episode_id, h.database, h.started_at, h.ended_at, h.duration,
       h.root_pid, h.root_user, h.root_application, h.root_client_addr,
       h.root_state, h.root_query, h.root_xact_start,
       h.max_waiters, h.max_depth, h.longest_wait, h.waiter_seconds,
       h.locked_objects, h.waiting_queries, h.ended_by, h.in_cycle
  FROM concurrency.lock_history_episodes() h
 ORDER BY h.episode_id;
COMMENT ON VIEW concurrency.lock_history IS
    'lock-wait episodes (one root blocker blocking others, from the first to the last sample that saw it), kept in memory; needs shared_preload_libraries';
GRANT SELECT ON concurrency.lock_history TO PUBLIC;

-- Clears the history (for administrators, as pg_stat_statements_reset).
CREATE FUNCTION concurrency.lock_history_reset() RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'concurrency_lock_history_reset';
COMMENT ON FUNCTION concurrency.lock_history_reset() IS
    'clears the lock-wait history; episodes still going on start again at the next sample';
REVOKE ALL ON FUNCTION concurrency.lock_history_reset() FROM PUBLIC;

-- The sampler: its pid, interval, samples taken and the CPU time they cost.
CREATE FUNCTION concurrency.lock_history_status(
    OUT sampler_pid integer, OUT interval_ms integer, OUT samples bigint,
    OUT sampler_cpu_seconds double precision, OUT last_sample_at timestamptz,
    OUT episodes_recorded bigint, OUT history_size integer)
    RETURNS SETOF record
    LANGUAGE c VOLATILE PARALLEL RESTRICTED
    AS 'MODULE_PATHNAME', 'concurrency_lock_history_status';
COMMENT ON FUNCTION concurrency.lock_history_status() IS
    'the lock-history sampler: pid (NULL when not running), interval, samples taken, their CPU time, last sample, episodes recorded since the last reset, ring size';
