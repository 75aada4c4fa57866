-- The GRANTs that were 0.1.0's permission model, on the queues of
-- before.sql (run before this file): a producer, a worker, a reader, and
-- PUBLIC allowed to enqueue into one queue. Checked after the update by
-- queue_permissions.after.sql.
CREATE ROLE upgrade_producer;
CREATE ROLE upgrade_worker;
CREATE ROLE upgrade_reader;
CREATE ROLE upgrade_outsider;
GRANT SELECT, INSERT ON concurrency."q_live" TO upgrade_producer;
GRANT SELECT, UPDATE, DELETE ON concurrency."q_live" TO upgrade_worker;
GRANT SELECT ON concurrency."q_live" TO upgrade_reader;
GRANT SELECT, INSERT ON concurrency."q_Mixed""Q" TO PUBLIC;
GRANT SELECT, UPDATE ON concurrency."q_Mixed""Q" TO upgrade_worker;
