-- ---------------------------------------------------------------------------
-- concurrency_monitor: a role whose members hold permission read on every
-- queue of every database where the extension is installed, present and
-- future — for metrics exporters and dashboards, as pg_monitor is for the
-- server's own statistics: GRANT concurrency_monitor TO postgres_exporter.
-- It gives read through the functions (queue_stats, queue_keys, task_status),
-- not SELECT on the queues' tables.
--
-- Roles belong to the cluster, not to a database: the first CREATE EXTENSION
-- (or ALTER EXTENSION ... UPDATE) creates it, later ones find it; DROP
-- EXTENSION leaves it (DROP ROLE it when no database uses the extension).
-- pg_dump does not dump roles: pg_dumpall --roles-only keeps it and its
-- members, and a restore into a cluster without it creates it again with the
-- extension.
-- ---------------------------------------------------------------------------
DO $monitor$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) 'concurrency_monitor') THEN
        -- CREATE EXTENSION in another database at the same time may create
        -- it first: its commit makes this CREATE ROLE fail on the unique
        -- index of role names, and the role is there
        BEGIN
            CREATE ROLE concurrency_monitor NOLOGIN;
            COMMENT ON ROLE concurrency_monitor IS
                'members hold permission read on every concurrency_ext queue (counts, keys, task status), present and future';
        EXCEPTION WHEN unique_violation OR duplicate_object THEN
            NULL;
        END;
    END IF;
END
$monitor$;
