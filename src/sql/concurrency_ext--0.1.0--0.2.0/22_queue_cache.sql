-- Task queue: the per-backend queue cache is invalidated by a statement
-- trigger on the catalog (0.2.0 caches the settings and privileges of each
-- queue instead of looking them up on every call).
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
