-- xact_lock_all / try_xact_lock_all in one session: each resource once
-- (repeats and order do not matter), transaction-level, released at the
-- end; NULLs and unknown names refused before anything is taken; an empty
-- array takes nothing. Concurrency: test/isolation/specs/locks_all.spec.
SELECT concurrency.register_subsystem('all_account', 81001);
BEGIN;
SELECT concurrency.xact_lock_all('all_account', ARRAY[3, -1, 3, 9223372036854775807, -9223372036854775808]);
SELECT name, resource, level, mode, count FROM concurrency.my_locks ORDER BY resource;
SELECT concurrency.try_xact_lock_all('all_account', ARRAY[3, 4], shared => false);
SELECT name, resource, count FROM concurrency.my_locks ORDER BY resource;
COMMIT;
SELECT count(*) FROM concurrency.my_locks;
BEGIN;
SELECT concurrency.xact_lock_all('all_account', ARRAY[1, 2], shared => true);
SELECT concurrency.try_xact_lock_all('all_account', ARRAY[2, 5], shared => true);
SELECT resource, mode, count FROM concurrency.my_locks ORDER BY resource;
SELECT concurrency.xact_lock_all('all_account', '{}');
SELECT concurrency.try_xact_lock_all('all_account', '{}');
SELECT concurrency.xact_lock_all('all_account', ARRAY[[1, 2], [3, 4]], timeout => '1 s');
SELECT resource, count FROM concurrency.my_locks ORDER BY resource, mode;
ROLLBACK;
-- refused before anything is taken
SELECT concurrency.xact_lock_all('all_account', ARRAY[1, NULL]);
SELECT concurrency.try_xact_lock_all('all_account', ARRAY[NULL]::bigint[]);
SELECT concurrency.xact_lock_all('all_account', NULL);
SELECT concurrency.try_xact_lock_all(NULL, ARRAY[1]);
SELECT concurrency.xact_lock_all('all_account', ARRAY[1], shared => NULL);
SELECT concurrency.xact_lock_all('all_nope', '{}');
SELECT concurrency.xact_lock_all('all_account', ARRAY[1], timeout => '-1 s');
SELECT count(*) FROM concurrency.my_locks;
SELECT concurrency.unregister_subsystem('all_account');
