-- ---------------------------------------------------------------------------
-- The names of a queue's relations (src/queue/relation_names.hpp), for the
-- SQL that needs them, so that they are built in one place: its tables
-- q_<queue>, k_, s_, r_, rk_<queue>, and their indexes and identity
-- sequence, named role first since 0.4.0 (ready_q_jobs, pkey_k_jobs,
-- id_seq_q_jobs: no such name is another queue's relation's) and table first
-- before (q_jobs_ready, kept by the queues made then).
-- ---------------------------------------------------------------------------

-- The name (unquoted) of table tbl (tasks, keys, slots, rate, key_rate) of a
-- queue, or with role, of that table's index or identity sequence of that
-- role (pkey, ready, scheduled, leased, dedupe, finished, waiting, dead,
-- keyed, fair, id_seq): the name it has, or, where the table has none
-- (yet), the name it gets. 22023 for a word it does not know.
CREATE FUNCTION concurrency_internal.queue_relation_name(queue text, tbl text, role text DEFAULT NULL)
    RETURNS text
    LANGUAGE c STABLE PARALLEL SAFE
    AS 'MODULE_PATHNAME', 'concurrency_queue_relation_name';
COMMENT ON FUNCTION concurrency_internal.queue_relation_name(text, text, text) IS
    'the name of a table of a queue (tasks, keys, slots, rate, key_rate), or of its index or identity sequence of a role (pkey, ready, …, id_seq), as it is or will be (internal)';
