-- ---------------------------------------------------------------------------
-- Queue counts over time: samples of concurrency.queue_stats kept in a table,
-- so that a chart of the last hours survives a page reload and a restart of
-- whatever draws it. Where the module is preloaded, the schedule runner of
-- each database (src/queue/time/stats_history.hpp) calls queue_stats_sample
-- every concurrency.stats_history_interval and drops the samples older than
-- concurrency.stats_history_retention. New in 0.4.0: the update from 0.3.0
-- takes this part as it is (src/sql/concurrency_ext--0.3.0--0.4.0/INSTALL_PARTS).
-- ---------------------------------------------------------------------------

-- One row per queue and sample. inserted: the rows inserted into the queue's
-- table since the server's statistics were reset (pg_stat_user_tables
-- .n_tup_ins), from which enqueued and finished per interval follow.
-- relid tells a re-created queue's series from the one before.
CREATE TABLE concurrency.queue_stats_sample (
    sampled_at timestamptz NOT NULL,
    queue      text        NOT NULL,
    relid      oid,
    ready      bigint, scheduled bigint, leased bigint, expired bigint, dead bigint,
    done       bigint, cancelled bigint, blocked bigint, waiting bigint,
    inserted   bigint,
    PRIMARY KEY (sampled_at, queue)
);
COMMENT ON TABLE concurrency.queue_stats_sample IS
    'samples of concurrency.queue_stats (queue_stats_sample); read them through the view concurrency.queue_stats_history';

-- Takes one sample of every queue (as the function's owner, who may read
-- every queue's counts) and deletes the samples older than `retain`.
-- Returns the rows inserted. (src/queue/time/stats_history.cpp: relid is the
-- queue's table, by the name src/queue/relation_names.hpp gives it.)
CREATE FUNCTION concurrency.queue_stats_sample(retain interval DEFAULT '1 day')
    RETURNS bigint
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_queue_stats_sample';
COMMENT ON FUNCTION concurrency.queue_stats_sample(interval) IS
    'adds a sample of every queue''s counts to concurrency.queue_stats_sample and deletes the samples older than retain; the schedule runner calls it every concurrency.stats_history_interval';
REVOKE ALL ON FUNCTION concurrency.queue_stats_sample(interval) FROM PUBLIC;

-- The samples of the queues whose counts the reader may see now: a holder
-- of read on the queue (mirrored as SELECT on its table, whose name
-- concurrency_internal.queue_relation_name gives) or a member of
-- concurrency_monitor, as concurrency.queue_stats decides. A sample of a
-- queue that is gone (no such name in the catalog) only to the members.
CREATE VIEW concurrency.queue_stats_history WITH (security_barrier) AS
    SELECT h.sampled_at, h.queue, h.relid, h.ready, h.scheduled, h.leased, h.expired, h.dead, h.done,
           h.cancelled, h.blocked, h.waiting, h.inserted
      FROM concurrency.queue_stats_sample h
     WHERE pg_catalog.pg_has_role('concurrency_monitor', 'USAGE')
        OR EXISTS (SELECT FROM concurrency.queue q
                    WHERE q.name OPERATOR(pg_catalog.=) h.queue
                      AND pg_catalog.has_table_privilege(
                              pg_catalog.to_regclass(pg_catalog.format('concurrency.%I',
                                  concurrency_internal.queue_relation_name(q.name, 'tasks')))::pg_catalog.oid,
                              'SELECT'));
COMMENT ON VIEW concurrency.queue_stats_history IS
    'samples of the counts of the queues you may read (queue_stats_sample), oldest first by sampled_at';
GRANT SELECT ON concurrency.queue_stats_history TO PUBLIC;
