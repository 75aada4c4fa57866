-- ---------------------------------------------------------------------------
-- Task queue: create_queue and alter_queue, with every setting of 0.3.0
-- (rate_limit, rate_period, fair, key_rate_limit, key_rate_period); the catalog they write and its trigger are in
-- 20_queue.sql and 21_queue_settings.sql.
-- ---------------------------------------------------------------------------

-- Creating queues is for the extension owner and superusers, unless EXECUTE
-- is granted. It runs as its owner (SECURITY DEFINER) so that such a grant is
-- all a role needs: the queue table it creates belongs to it (drop_queue, in
-- 20_queue.sql, works the same way).
CREATE FUNCTION concurrency.create_queue(queue text, lease interval DEFAULT '30 seconds',
                                         max_attempts integer DEFAULT 5, retain interval DEFAULT NULL,
                                         key_limit integer DEFAULT NULL, max_leased integer DEFAULT NULL,
                                         distributed boolean DEFAULT false, rate_limit integer DEFAULT NULL,
                                         rate_period interval DEFAULT NULL, key_rate_limit integer DEFAULT NULL,
                                         key_rate_period interval DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_create_queue';
COMMENT ON FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean, integer, interval, integer, interval) IS
    'creates the task queue with its table concurrency."q_<queue>"; the same settings again is a no-op, other settings are an error (see alter_queue); distributed => true also makes it a Citus distributed queue (on a coordinator; see distribute_queue); rate_limit claims at most in any rate_period, key_rate_limit claims of each concurrency key in any key_rate_period';
REVOKE ALL ON FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean, integer, interval, integer, interval) FROM PUBLIC;

-- Only the owner of a queue's table (or a superuser) may change its settings.
CREATE FUNCTION concurrency.alter_queue(queue text, lease interval DEFAULT NULL, max_attempts integer DEFAULT NULL,
                                        retain interval DEFAULT NULL, key_limit integer DEFAULT NULL,
                                        max_leased integer DEFAULT NULL, rate_limit integer DEFAULT NULL,
                                        rate_period interval DEFAULT NULL, fair boolean DEFAULT NULL,
                                        key_rate_limit integer DEFAULT NULL, key_rate_period interval DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_alter_queue';
COMMENT ON FUNCTION concurrency.alter_queue(text, interval, integer, interval, integer, integer, integer, interval, boolean, integer, interval) IS
    'changes settings of a queue in place: NULL keeps a setting; retain => ''0'', key_limit => 0, max_leased => 0, rate_limit => 0, key_rate_limit => 0 remove it; fair => true rotates claims among concurrency keys';
REVOKE ALL ON FUNCTION concurrency.alter_queue(text, interval, integer, interval, integer, integer, integer, interval, boolean, integer, interval) FROM PUBLIC;
