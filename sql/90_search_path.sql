-- search_path safety: functions and operators that a caller places earlier in
-- its search_path than pg_catalog must not change what the extension does.
-- Every trap raises an error if it is ever called. The session is new, so no
-- plan of the extension was prepared before the traps were set.
\c
CREATE SCHEMA evil;
CREATE FUNCTION evil.trap_text(text, text) RETURNS boolean LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION 'trap: text = text called'; END$$;
CREATE FUNCTION evil.trap_bigint(bigint, bigint) RETURNS boolean LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION 'trap: bigint = bigint called'; END$$;
CREATE FUNCTION evil.trap_ts(timestamptz, timestamptz) RETURNS boolean LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION 'trap: timestamptz comparison called'; END$$;
CREATE FUNCTION evil.trap_ts_plus(timestamptz, interval) RETURNS timestamptz LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION 'trap: timestamptz + interval called'; END$$;
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.trap_text);
CREATE OPERATOR evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.trap_bigint);
CREATE OPERATOR evil.< (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil.trap_ts);
CREATE OPERATOR evil.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil.trap_ts);
CREATE OPERATOR evil.> (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil.trap_ts);
CREATE OPERATOR evil.+ (LEFTARG = timestamptz, RIGHTARG = interval, FUNCTION = evil.trap_ts_plus);
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION 'trap: now() called'; END$$;
CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION 'trap: clock_timestamp() called'; END$$;
CREATE FUNCTION evil.pg_notify(text, text) RETURNS void LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION 'trap: pg_notify() called'; END$$;
CREATE FUNCTION evil.lower(text) RETURNS text LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION 'trap: lower() called'; END$$;
CREATE FUNCTION evil.format(text, VARIADIC "any") RETURNS text LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION 'trap: format() called'; END$$;
CREATE FUNCTION evil.pg_advisory_xact_lock(bigint) RETURNS void LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION 'trap: pg_advisory_xact_lock() called'; END$$;
CREATE FUNCTION evil.pg_blocking_pids(int) RETURNS int[] LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION 'trap: pg_blocking_pids() called'; END$$;
CREATE FUNCTION evil.jsonb_build_object(VARIADIC "any") RETURNS jsonb LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION 'trap: jsonb_build_object() called'; END$$;
CREATE FUNCTION evil.random() RETURNS double precision LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION 'trap: random() called'; END$$;

SET search_path = evil, pg_catalog, public;
-- the traps are armed: unqualified names now reach them
SELECT 'a' = 'a';
SELECT now();

-- named locks
SELECT concurrency.register_subsystem('sp_relay', 7301, 'search_path test');
SELECT concurrency.register_subsystem('sp_relay', 7301, 'again');
SELECT concurrency.register_subsystem('sp_other', 7302);
BEGIN;
SELECT concurrency.xact_lock('sp_relay');
SELECT concurrency.try_xact_lock('sp_relay', 42);
SELECT concurrency.xact_lock(ARRAY['sp_other', 'sp_relay'], '1 second');
SELECT name, resource, level, mode, count FROM concurrency.my_locks ORDER BY name, resource NULLS FIRST;
SELECT subsystem, resource, mode, granted, suspect_leak FROM concurrency.held_locks
 WHERE pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() ORDER BY subsystem, resource NULLS FIRST;
COMMIT;
SELECT concurrency.session_lock('sp_relay', 1, '1 second');
SELECT concurrency.try_session_lock('sp_relay', 1);
SELECT concurrency.session_unlock('sp_relay', 1);
SELECT concurrency.session_unlock('sp_relay', 1);
SELECT concurrency.unregister_subsystem('sp_other');

-- the queue
SELECT concurrency.create_queue('sp_jobs', '30 seconds', 3);
SELECT concurrency.create_queue('sp_jobs', '30 seconds', 3);
SELECT concurrency.enqueue('sp_jobs', '{"n": 1}') > 0 AS enqueued;
SELECT concurrency.enqueue('sp_jobs', '{"n": 2}', dedupe_key => 'k') AS first_id \gset
SELECT concurrency.enqueue('sp_jobs', '{"n": 3}', dedupe_key => 'k') OPERATOR(pg_catalog.=) :first_id AS deduplicated;
SELECT count(*) FROM concurrency.enqueue_batch('sp_jobs', ARRAY['{}', '{}']::jsonb[]);
CREATE TEMP TABLE claimed AS SELECT * FROM concurrency.dequeue('sp_jobs', 2, worker => 'w1');
SELECT count(*) FROM claimed;
SELECT concurrency.heartbeat('sp_jobs', task_id, lease_token) IS NOT NULL AS extended FROM claimed ORDER BY task_id;
SELECT concurrency.complete('sp_jobs', task_id, lease_token) FROM (SELECT * FROM claimed ORDER BY task_id LIMIT 1) c;
SELECT concurrency.fail('sp_jobs', task_id, lease_token, 'boom', '0 seconds') FROM (SELECT * FROM claimed ORDER BY task_id OFFSET 1) c;
SELECT concurrency.retry_dead('sp_jobs');
SELECT queue, ready, scheduled, leased, dead FROM concurrency.queue_stats WHERE queue OPERATOR(pg_catalog.=) 'sp_jobs';
SELECT concurrency.drop_queue('sp_jobs');

-- diagnostics
SELECT count(*) >= 0 AS ok FROM concurrency.lock_waits;
SELECT count(*) >= 0 AS ok FROM concurrency.lock_tree;

RESET search_path;
SELECT concurrency.unregister_subsystem('sp_relay');
SET client_min_messages = warning;
DROP SCHEMA evil CASCADE;
