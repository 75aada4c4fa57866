-- The lock diagnostics of 0.2.0 give way to 0.3.0's, which src/sql/30_diagnostics.sql
-- (in INSTALL_PARTS) creates again, defined once: lock_tree gains usename,
-- application_name and client_addr beside each pid and a cancel action for a
-- DDL that holds readers up only by its place in the lock queue (from the new
-- column blocks_only_by_queue of lock_tree_nodes); lock_waits gains the
-- client address of both sides. Result columns cannot change in place, so the
-- views and functions are dropped first. They hold no data; GRANTs or
-- REVOKEs made on them by hand must be made again after the update.
DROP VIEW concurrency.lock_tree;
DROP VIEW concurrency.lock_waits;
DROP FUNCTION concurrency.lock_tree_nodes();
DROP FUNCTION concurrency.lock_wait_edges();
DROP FUNCTION concurrency.locked_object(pg_catalog.pg_locks);
