-- The table examples/worker.py writes to, created once by a role that may
-- create tables, so that the worker itself needs only `work` on its queue
-- and INSERT on the table:
--   psql -f examples/worker_setup.sql
--   psql -v queue=emails -v worker_role=mailer_worker -f examples/worker_setup.sql   # and the grants
CREATE TABLE IF NOT EXISTS worker_results (
    task_id bigint,
    attempt int,
    worker  text,
    payload jsonb,
    done_at timestamptz DEFAULT now()
);
\if :{?worker_role}
SELECT concurrency.grant_queue(:'queue', :'worker_role', ARRAY['work']);
GRANT INSERT ON worker_results TO :"worker_role";
\endif
