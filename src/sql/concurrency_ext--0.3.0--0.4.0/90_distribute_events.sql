-- An installation whose queues were distributed before (the update from
-- 0.3.0): its event tables, new and empty, distributed when the update
-- commits (the trigger above, on the coordinator).
DO $distribute$
BEGIN
    IF concurrency.citus_node_role() = 'coordinator' THEN
        UPDATE concurrency.distributed_queue SET queue = queue;
    END IF;
END
$distribute$;
