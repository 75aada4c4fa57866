-- ---------------------------------------------------------------------------
-- Task queue: pausing a queue (docs/queue.md, "Pausing a queue"). While
-- concurrency.queue.paused is set, dequeue claims nothing (a waiting call
-- keeps waiting and is woken by the resume); enqueue works, and leased tasks
-- may still be heartbeated, completed, failed, released and cancelled. The
-- flag is a column of the catalog, so a pause survives restarts, pg_dump and
-- pg_restore. Like alter_queue these are SECURITY DEFINER (they change the
-- catalog) and check that the caller holds permission manage on the queue.
-- ---------------------------------------------------------------------------

CREATE FUNCTION concurrency.pause_queue(queue text)
    RETURNS boolean
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_pause_queue';
COMMENT ON FUNCTION concurrency.pause_queue(text) IS
    'stops claims from the queue until resume_queue (enqueue, heartbeat, complete, fail and release go on); returns false if it was paused already';

CREATE FUNCTION concurrency.resume_queue(queue text)
    RETURNS boolean
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_resume_queue';
COMMENT ON FUNCTION concurrency.resume_queue(text) IS
    'lets workers claim from a paused queue again, waking its waiting dequeue calls at commit; returns false if it was not paused';
