-- ---------------------------------------------------------------------------
-- What is no API goes to schema concurrency_internal (made in
-- 41_distributed_routed.sql), so that \df concurrency.* lists the public API
-- only: the trigger functions behind the catalogs' caches, and the functions
-- that views return the rows of (the views call them by OID: PUBLIC keeps
-- EXECUTE on them, and the schema's USAGE is not needed for that). Last, in a
-- fresh install as in the update, so that both end alike.
-- ---------------------------------------------------------------------------

ALTER FUNCTION concurrency.subsystem_changed() SET SCHEMA concurrency_internal;
ALTER FUNCTION concurrency.queue_changed() SET SCHEMA concurrency_internal;
ALTER FUNCTION concurrency.queue_permission_changed() SET SCHEMA concurrency_internal;
ALTER FUNCTION concurrency.my_named_locks() SET SCHEMA concurrency_internal;
ALTER FUNCTION concurrency.queue_stats_rows() SET SCHEMA concurrency_internal;
ALTER FUNCTION concurrency.schedule_rows() SET SCHEMA concurrency_internal;
ALTER FUNCTION concurrency.cluster_lock_wait_rows() SET SCHEMA concurrency_internal;
