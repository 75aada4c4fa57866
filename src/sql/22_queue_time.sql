-- ---------------------------------------------------------------------------
-- Task queue: schedules (docs/queue.md, "Schedules"). A schedule enqueues one
-- task per due time of a cron expression or an interval. There is no
-- scheduler process: dequeue on the schedule's queue turns the due times
-- that have passed into tasks (src/queue/time/schedule.cpp), under the schedule
-- row's lock and in the same transaction that advances last_due, so each
-- due time becomes exactly one task however many workers look at once.
-- ---------------------------------------------------------------------------

-- One row per schedule. last_due: every due time up to it was enqueued or
-- skipped (catch_up); next_run_at: the first due time after it. Extension
-- configuration (pg_dump keeps the rows, and with them last_due, so that a
-- restored database enqueues no due time again); its queue's drop drops it.
CREATE TABLE IF NOT EXISTS concurrency.schedule (
    name            text        PRIMARY KEY CHECK (octet_length(name) BETWEEN 1 AND 200),
    queue           text        NOT NULL REFERENCES concurrency.queue (name) ON DELETE CASCADE,
    cron            text,
    every           interval,
    payload         jsonb       NOT NULL DEFAULT '{}',
    time_zone       text        NOT NULL DEFAULT 'UTC',
    priority        integer     NOT NULL DEFAULT 0,
    concurrency_key text,
    catch_up        integer     NOT NULL DEFAULT 1 CHECK (catch_up BETWEEN 1 AND 1000),
    last_due        timestamptz NOT NULL,
    next_run_at     timestamptz,
    last_run_at     timestamptz,
    last_task_id    bigint,
    skipped         bigint      NOT NULL DEFAULT 0,
    enabled         boolean     NOT NULL DEFAULT true,
    CHECK ((cron IS NULL) <> (every IS NULL))
);
COMMENT ON TABLE concurrency.schedule IS
    'catalog of concurrency_ext schedules (schedule, unschedule; the view concurrency.schedules shows them)';
CREATE INDEX IF NOT EXISTS schedule_queue_next ON concurrency.schedule (queue, next_run_at);
SELECT pg_catalog.pg_extension_config_dump('concurrency.schedule', '');

-- Each backend caches the earliest next_run_at of a queue's schedules, so that
-- a dequeue with nothing due reads no table: this statement trigger (the
-- catalog's own function: it invalidates the relcache entry of the table it
-- fires on) tells every backend to read it again.
CREATE OR REPLACE TRIGGER schedule_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON concurrency.schedule
    FOR EACH STATEMENT EXECUTE FUNCTION concurrency_internal.queue_changed();

-- SECURITY DEFINER (they write the catalog); the caller needs permission
-- manage on the schedule's queue.
CREATE OR REPLACE FUNCTION concurrency.schedule(name text, queue text, cron text DEFAULT NULL, every interval DEFAULT NULL,
                                     payload jsonb DEFAULT '{}', time_zone text DEFAULT 'UTC',
                                     priority integer DEFAULT 0, concurrency_key text DEFAULT NULL,
                                     catch_up integer DEFAULT 1)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_schedule';
COMMENT ON FUNCTION concurrency.schedule(text, text, text, interval, jsonb, text, integer, text, integer) IS
    'enqueues a task into the queue at each due time of cron (in time_zone) or every interval, its payload with "scheduled_for"; the same settings again is a no-op, other settings replace the schedule; needs manage on the queue';

CREATE OR REPLACE FUNCTION concurrency.unschedule(name text)
    RETURNS boolean
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_unschedule';
COMMENT ON FUNCTION concurrency.unschedule(text) IS
    'removes the schedule (its tasks already enqueued stay); false if there is none; needs manage on its queue';

CREATE OR REPLACE FUNCTION concurrency_internal.schedule_rows()
    RETURNS TABLE (name text, queue text, spec text, time_zone text, next_run_at timestamptz,
                   last_run_at timestamptz, last_task_id bigint, enabled boolean, skipped bigint)
    LANGUAGE c STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_schedule_rows';
COMMENT ON FUNCTION concurrency_internal.schedule_rows() IS
    'rows of the view concurrency.schedules';

CREATE OR REPLACE VIEW concurrency.schedules AS
    SELECT s.name, s.queue, s.spec, s.time_zone, s.next_run_at, s.last_run_at, s.last_task_id, s.enabled,
           s.skipped
      FROM concurrency_internal.schedule_rows() s;
COMMENT ON VIEW concurrency.schedules IS
    'schedules on the queues you may read: the cron expression or interval, the next due time, the due time and id of the latest task enqueued, and how many due times were skipped (catch_up)';
GRANT SELECT ON concurrency.schedules TO PUBLIC;

-- ---------------------------------------------------------------------------
-- Queue counts over time: samples of concurrency.queue_stats kept in a table,
-- so that a chart of the last hours survives a page reload and a restart of
-- whatever draws it. Where the module is preloaded, the schedule runner of
-- each database (src/queue/time/stats_history.hpp) calls queue_stats_sample
-- every concurrency.stats_history_interval and drops the samples older than
-- concurrency.stats_history_retention. New in 0.4.0.
-- ---------------------------------------------------------------------------

-- One row per queue and sample. inserted: the rows inserted into the queue's
-- table since the server's statistics were reset (pg_stat_user_tables
-- .n_tup_ins), from which enqueued and finished per interval follow.
-- relid tells a re-created queue's series from the one before.
CREATE TABLE IF NOT EXISTS concurrency.queue_stats_sample (
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
CREATE OR REPLACE FUNCTION concurrency.queue_stats_sample(retain interval DEFAULT '1 day')
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
CREATE OR REPLACE VIEW concurrency.queue_stats_history WITH (security_barrier) AS
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
