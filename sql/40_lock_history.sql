-- Lock-wait history, as far as it can be tested on any server: the view's
-- columns, the settings validated, the reset for administrators only. Nothing
-- here reads or resets a live server's history (make installcheck may run
-- against a server with the preload): without the preload, see
-- 40_lock_history_off; with it, test/t/040_history.pl.

-- the view's columns, in order
SELECT attname, format_type(atttypid, atttypmod)
  FROM pg_attribute WHERE attrelid = 'concurrency.lock_history'::regclass AND attnum > 0 ORDER BY attnum;

-- the settings: defaults, units, ranges (out of range: the server's usual
-- error); they exist once the module is loaded, which any of its calls does
SELECT concurrency.version() IS NOT NULL AS loaded;
-- (history_size is defined only with the preload: test/t/040_history.pl)
SELECT name, boot_val, unit, context, min_val, max_val
  FROM pg_settings WHERE name LIKE 'concurrency.history%' AND name <> 'concurrency.history_size' ORDER BY name;
ALTER SYSTEM SET concurrency.history_interval = '5ms';
ALTER SYSTEM SET concurrency.history_interval = '2h';
ALTER SYSTEM SET concurrency.history_interval = -1;
ALTER SYSTEM SET concurrency.history_log_min_duration = -2;
ALTER SYSTEM SET concurrency.history_log_min_duration = 'soon';
-- changed by reload, not per session
SET concurrency.history_interval = '100ms';
SET concurrency.history_log_min_duration = '1s';

-- only administrators may reset (REVOKEd from PUBLIC)
CREATE ROLE history_reader;
SET ROLE history_reader;
SELECT concurrency.lock_history_reset();
RESET ROLE;
DROP ROLE history_reader;
SELECT has_function_privilege('public', 'concurrency.lock_history_reset()', 'EXECUTE') AS public_may_reset,
       has_table_privilege('public', 'concurrency.lock_history', 'SELECT') AS public_may_read;

-- every 0.1.0 capability works with or without the preload
SELECT concurrency.version() IS NOT NULL AS loaded;
SELECT count(*) >= 0 AS diagnostics_work FROM concurrency.lock_tree;
