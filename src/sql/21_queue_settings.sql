-- ---------------------------------------------------------------------------
-- Task queue settings: the per-backend cache of them and the catalog trigger
-- that keeps it right (create_queue and alter_queue, which write them, are in
-- 21_queue_settings_api.sql).
-- ---------------------------------------------------------------------------

-- Plain DML sends no relcache invalidation; this statement trigger sends one
-- for the catalog, so that every backend's queue cache reads the settings
-- again (see src/queue/queue.hpp). Also fires for COPY (pg_restore).
CREATE FUNCTION concurrency.queue_changed() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'concurrency_queue_changed';
COMMENT ON FUNCTION concurrency.queue_changed() IS
    'trigger: invalidates the backends'' queue caches after a change of concurrency.queue';
REVOKE EXECUTE ON FUNCTION concurrency.queue_changed() FROM PUBLIC;
CREATE TRIGGER queue_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON concurrency.queue
    FOR EACH STATEMENT EXECUTE FUNCTION concurrency.queue_changed();
