-- ---------------------------------------------------------------------------
-- Task queue: schedules (docs/queue.md, "Schedules"). A schedule enqueues one
-- task per due time of a cron expression or an interval. There is no
-- scheduler process: dequeue on the schedule's queue turns the due times
-- that have passed into tasks (src/queue/schedule.cpp), under the schedule
-- row's lock and in the same transaction that advances last_due, so each
-- due time becomes exactly one task however many workers look at once.
-- ---------------------------------------------------------------------------

-- One row per schedule. last_due: every due time up to it was enqueued or
-- skipped (catch_up); next_run_at: the first due time after it. Extension
-- configuration (pg_dump keeps the rows, and with them last_due, so that a
-- restored database enqueues no due time again); its queue's drop drops it.
CREATE TABLE concurrency.schedule (
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
CREATE INDEX schedule_queue_next ON concurrency.schedule (queue, next_run_at);
SELECT pg_catalog.pg_extension_config_dump('concurrency.schedule', '');

-- Each backend caches the earliest next_run_at of a queue's schedules, so that
-- a dequeue with nothing due reads no table: this statement trigger (the
-- catalog's own function: it invalidates the relcache entry of the table it
-- fires on) tells every backend to read it again.
CREATE TRIGGER schedule_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON concurrency.schedule
    FOR EACH STATEMENT EXECUTE FUNCTION concurrency.queue_changed();

-- SECURITY DEFINER (they write the catalog); the caller needs permission
-- manage on the schedule's queue.
CREATE FUNCTION concurrency.schedule(name text, queue text, cron text DEFAULT NULL, every interval DEFAULT NULL,
                                     payload jsonb DEFAULT '{}', time_zone text DEFAULT 'UTC',
                                     priority integer DEFAULT 0, concurrency_key text DEFAULT NULL,
                                     catch_up integer DEFAULT 1)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_schedule';
COMMENT ON FUNCTION concurrency.schedule(text, text, text, interval, jsonb, text, integer, text, integer) IS
    'enqueues a task into the queue at each due time of cron (in time_zone) or every interval, its payload with "scheduled_for"; the same settings again is a no-op, other settings replace the schedule; needs manage on the queue';

CREATE FUNCTION concurrency.unschedule(name text)
    RETURNS boolean
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_unschedule';
COMMENT ON FUNCTION concurrency.unschedule(text) IS
    'removes the schedule (its tasks already enqueued stay); false if there is none; needs manage on its queue';

CREATE FUNCTION concurrency.schedule_rows()
    RETURNS TABLE (name text, queue text, spec text, time_zone text, next_run_at timestamptz,
                   last_run_at timestamptz, last_task_id bigint, enabled boolean, skipped bigint)
    LANGUAGE c STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_schedule_rows';
COMMENT ON FUNCTION concurrency.schedule_rows() IS
    'rows of the view concurrency.schedules';

CREATE VIEW concurrency.schedules AS
    SELECT s.name, s.queue, s.spec, s.time_zone, s.next_run_at, s.last_run_at, s.last_task_id, s.enabled,
           s.skipped
      FROM concurrency.schedule_rows() s;
COMMENT ON VIEW concurrency.schedules IS
    'schedules on the queues you may read: the cron expression or interval, the next due time, the due time and id of the latest task enqueued, and how many due times were skipped (catch_up)';
GRANT SELECT ON concurrency.schedules TO PUBLIC;
