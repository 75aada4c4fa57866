-- Queue permissions, tried the way an attacker would: traps in the caller's
-- search_path, roles named like SQL, dropped and re-created roles and queues,
-- SET ROLE and SECURITY DEFINER tricks, and code of a queue's owner run on
-- behalf of a more privileged caller.
CREATE ROLE regress_perm_owner;
CREATE ROLE regress_perm_worker;
CREATE ROLE regress_perm_outsider;
CREATE TABLE perm_canary (x int);
GRANT EXECUTE ON FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean, integer, interval, integer, interval) TO regress_perm_owner;
GRANT EXECUTE ON FUNCTION concurrency.drop_queue(text) TO regress_perm_owner;
SET ROLE regress_perm_owner;
SELECT concurrency.create_queue('jobs');
SELECT concurrency.enqueue('jobs', '{"n": 1}');
RESET ROLE;

-- 1. Traps in the caller's search_path: an "=" and "<>" that say yes to
-- everything, and look-alikes of unnest, pg_roles and queue_permission. The
-- checks and the grants mean exactly what they say.
CREATE SCHEMA regress_perm_evil;
GRANT USAGE ON SCHEMA regress_perm_evil TO PUBLIC;
CREATE FUNCTION regress_perm_evil.yes(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR regress_perm_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_perm_evil.yes);
CREATE FUNCTION regress_perm_evil.yes(oid, oid) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR regress_perm_evil.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = regress_perm_evil.yes);
CREATE OPERATOR regress_perm_evil.<> (LEFTARG = oid, RIGHTARG = oid, FUNCTION = regress_perm_evil.yes);
CREATE FUNCTION regress_perm_evil.unnest(text[]) RETURNS SETOF text LANGUAGE sql
    AS $$SELECT unnest(ARRAY['enqueue', 'work', 'read', 'manage'])$$;
CREATE VIEW regress_perm_evil.pg_roles AS SELECT 0::oid AS oid;
CREATE TABLE regress_perm_evil.queue_permission (queue text, grantee regrole, permission text);
GRANT ALL ON ALL TABLES IN SCHEMA regress_perm_evil TO PUBLIC;
INSERT INTO regress_perm_evil.queue_permission VALUES ('jobs', 'regress_perm_outsider', 'work');
SET search_path = regress_perm_evil, pg_catalog, public;
SELECT 'a'::text = 'b'::text AS evil_equals_active;
SET ROLE regress_perm_owner;
SELECT concurrency.grant_queue('jobs', 'regress_perm_worker', '{enqueue}');
RESET ROLE;
SET ROLE regress_perm_outsider;
SELECT task_id FROM concurrency.dequeue('jobs');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET ROLE regress_perm_worker;
SELECT concurrency.enqueue('jobs', '{"n": 2}') > 0 AS enqueued;
SELECT task_id FROM concurrency.dequeue('jobs');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
RESET search_path;
-- exactly one row was written, for the named role and permission
SELECT queue, grantee, permission FROM concurrency.queue_permission WHERE queue = 'jobs';
DROP SCHEMA regress_perm_evil CASCADE;

-- 2. Roles named like SQL. The name is stored as the role, quoted where it is
-- built into a GRANT, and shown as a literal in the hint.
CREATE ROLE "x'); DROP TABLE perm_canary; --";
CREATE ROLE "Robert""; DROP TABLE perm_canary; --";
CREATE ROLE "12345";
CREATE ROLE "PUBLIC";
CREATE ROLE "-";
SELECT concurrency.grant_queue('jobs', 'x''); DROP TABLE perm_canary; --', '{read}');
SELECT concurrency.grant_queue('jobs', 'Robert"; DROP TABLE perm_canary; --', '{read,work}');
SELECT concurrency.grant_queue('jobs', '12345', '{read}');
SELECT concurrency.grant_queue('jobs', 'PUBLIC', '{read}');   -- the role named PUBLIC, not everyone
SELECT concurrency.grant_queue('jobs', '-', '{enqueue}');     -- the role named -, not everyone
SELECT grantee, permission FROM concurrency.queue_permission
 WHERE queue = 'jobs' AND grantee::text NOT LIKE 'regress%' ORDER BY grantee::oid, permission;
SELECT r.rolname, has_table_privilege(r.oid, 'concurrency."q_jobs"', 'SELECT') AS may_select
  FROM pg_roles r WHERE r.rolname IN ('x''); DROP TABLE perm_canary; --', 'Robert"; DROP TABLE perm_canary; --',
                                      '12345', 'PUBLIC', '-') ORDER BY r.rolname;
SELECT has_table_privilege('regress_perm_outsider', 'concurrency."q_jobs"', 'SELECT') AS public_may_select;
SET ROLE regress_perm_outsider;
SELECT concurrency.enqueue('jobs', '{}');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET ROLE "x'); DROP TABLE perm_canary; --";
SELECT task_id FROM concurrency.dequeue('jobs');
RESET ROLE;
SELECT concurrency.revoke_queue('jobs', 'x''); DROP TABLE perm_canary; --', '{read}');
SELECT concurrency.revoke_queue('jobs', 'Robert"; DROP TABLE perm_canary; --', '{read,work}');
SELECT concurrency.revoke_queue('jobs', '12345', '{read}');
SELECT concurrency.revoke_queue('jobs', 'PUBLIC', '{read}');
SELECT concurrency.revoke_queue('jobs', '-', '{enqueue}');
SELECT to_regclass('perm_canary') IS NOT NULL AS canary_alive;
DROP ROLE "x'); DROP TABLE perm_canary; --";
DROP ROLE "Robert""; DROP TABLE perm_canary; --";
DROP ROLE "12345";
DROP ROLE "PUBLIC";
DROP ROLE "-";

-- 3. A dropped role leaves no permission to a new role of the same name: the
-- grantee is the role's OID. A role holding read holds SELECT on the table,
-- so PostgreSQL refuses to drop it until that is revoked (or DROP OWNED).
CREATE ROLE regress_perm_temp;
SELECT concurrency.grant_queue('jobs', 'regress_perm_temp', '{work,read}');
DROP ROLE regress_perm_temp;
\echo :LAST_ERROR_SQLSTATE
DROP OWNED BY regress_perm_temp;
DROP ROLE regress_perm_temp;
-- its rows stay behind, inert, showing the old OID instead of a name
SELECT count(*) AS dangling_rows FROM concurrency.queue_permission
 WHERE queue = 'jobs' AND NOT EXISTS (SELECT FROM pg_roles r WHERE r.oid = grantee);
CREATE ROLE regress_perm_temp;
SET ROLE regress_perm_temp;
SELECT task_id FROM concurrency.dequeue('jobs');
\echo :LAST_ERROR_SQLSTATE
SELECT queue, ready FROM concurrency.queue_stats WHERE queue = 'jobs';
RESET ROLE;
-- the next grant_queue, revoke_queue or create_queue deletes them
SELECT concurrency.revoke_queue('jobs', 'regress_perm_worker', '{work}');
SELECT count(*) AS dangling_rows FROM concurrency.queue_permission
 WHERE NOT EXISTS (SELECT FROM pg_roles r WHERE r.oid = grantee) AND grantee <> 0;
DROP ROLE regress_perm_temp;

-- 4. A queue dropped and re-created under the same name starts with no
-- permissions, also in a session that had them cached.
SET ROLE regress_perm_owner;
SELECT concurrency.create_queue('again');
SELECT concurrency.grant_queue('again', 'regress_perm_worker', '{work,read}');
SELECT concurrency.enqueue('again', '{}') > 0 AS enqueued;
RESET ROLE;
SET ROLE regress_perm_worker;
SELECT count(*) AS claimed FROM concurrency.dequeue('again');
RESET ROLE;
SET ROLE regress_perm_owner;
SELECT concurrency.drop_queue('again');
SELECT concurrency.create_queue('again');
SELECT concurrency.enqueue('again', '{}') > 0 AS enqueued;
RESET ROLE;
SELECT count(*) AS rows_of_again FROM concurrency.queue_permission WHERE queue = 'again';
SET ROLE regress_perm_worker;
SELECT count(*) FROM concurrency.dequeue('again');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM concurrency."q_again";
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- the same when the table was dropped by hand and create_queue makes it again
SET ROLE regress_perm_owner;
SELECT concurrency.grant_queue('again', 'regress_perm_worker', '{work}');
DROP TABLE concurrency."q_again";
SELECT concurrency.create_queue('again');
RESET ROLE;
SELECT count(*) AS rows_of_again FROM concurrency.queue_permission WHERE queue = 'again';

-- 5. SET ROLE and SECURITY DEFINER: the check is for the current role.
CREATE ROLE regress_perm_team NOINHERIT;
CREATE ROLE regress_perm_member NOINHERIT IN ROLE regress_perm_team;
CREATE ROLE regress_perm_inheritor IN ROLE regress_perm_team;
SELECT concurrency.grant_queue('jobs', 'regress_perm_team', '{work}');
SET ROLE regress_perm_inheritor;            -- inherits the team's permissions
SELECT count(*) >= 0 AS inheritor_claims FROM concurrency.dequeue('jobs');
RESET ROLE;
SET ROLE regress_perm_member;               -- NOINHERIT: only after SET ROLE to the team
SELECT count(*) FROM concurrency.dequeue('jobs');
\echo :LAST_ERROR_SQLSTATE
SET ROLE regress_perm_team;
SELECT count(*) >= 0 AS member_as_team_claims FROM concurrency.dequeue('jobs');
RESET ROLE;
-- a SECURITY DEFINER function acts with its owner's permissions, as anywhere
-- in PostgreSQL: an outsider's function gets nothing by being called by a
-- worker
CREATE FUNCTION public.perm_claim_as_outsider() RETURNS bigint LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog AS $$SELECT count(*) FROM concurrency.dequeue('jobs')$$;
ALTER FUNCTION public.perm_claim_as_outsider() OWNER TO regress_perm_outsider;
SET ROLE regress_perm_inheritor;
SELECT public.perm_claim_as_outsider();
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP FUNCTION public.perm_claim_as_outsider();
-- the role after a refused or failed call is the caller's, in a savepoint too
SET ROLE regress_perm_outsider;
BEGIN;
SAVEPOINT s;
SELECT count(*) FROM concurrency.dequeue('jobs');
ROLLBACK TO SAVEPOINT s;
SELECT current_user, session_user = current_user AS is_session_user;
COMMIT;
RESET ROLE;
SELECT min(id) AS first_task FROM concurrency."q_jobs" \gset
SET ROLE regress_perm_inheritor;
BEGIN;
SAVEPOINT s;
SELECT concurrency.complete('jobs', :first_task, -1);
ROLLBACK TO SAVEPOINT s;
SELECT current_user;
COMMIT;
RESET ROLE;

-- 6. The owner's code runs as the owner, never as the caller: a trigger the
-- owner puts on its queue's table sees the owner as current_user when a
-- superuser enqueues, and cannot leave anything behind in the session.
CREATE TABLE perm_trigger_log (current_role_name name);
GRANT INSERT ON perm_trigger_log TO regress_perm_owner;
CREATE FUNCTION public.perm_owner_trigger() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog AS $$
BEGIN
  INSERT INTO public.perm_trigger_log VALUES (current_user);
  IF NEW.payload ? 'temp' THEN
    CREATE TEMP TABLE perm_hijack (x int);
  END IF;
  RETURN NEW;
END$$;
ALTER FUNCTION public.perm_owner_trigger() OWNER TO regress_perm_owner;
ALTER TABLE concurrency."q_jobs" OWNER TO regress_perm_owner;
SET ROLE regress_perm_owner;
CREATE TRIGGER perm_owner_trigger BEFORE INSERT ON concurrency."q_jobs"
    FOR EACH ROW EXECUTE FUNCTION public.perm_owner_trigger();
RESET ROLE;
SELECT concurrency.enqueue('jobs', '{"by": "superuser"}') > 0 AS enqueued;
SELECT current_role_name FROM perm_trigger_log;
\set SHOW_CONTEXT never
SELECT concurrency.enqueue('jobs', '{"temp": true}');
\echo :LAST_ERROR_SQLSTATE
\set SHOW_CONTEXT errors
SELECT current_user = session_user AS back_to_caller;
SET ROLE regress_perm_owner;
DROP TRIGGER perm_owner_trigger ON concurrency."q_jobs";
RESET ROLE;

-- 7. The trigger function that keeps the caches right is not a way in.
SELECT concurrency_internal.queue_permission_changed();
\echo :LAST_ERROR_SQLSTATE

-- clean up
SET ROLE regress_perm_owner;
SELECT concurrency.drop_queue('jobs');
SELECT concurrency.drop_queue('again');
RESET ROLE;
SELECT count(*) AS rows_left FROM concurrency.queue_permission;
DROP FUNCTION public.perm_owner_trigger();
DROP TABLE perm_trigger_log, perm_canary;
REVOKE EXECUTE ON FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean, integer, interval, integer, interval) FROM regress_perm_owner;
REVOKE EXECUTE ON FUNCTION concurrency.drop_queue(text) FROM regress_perm_owner;
DROP ROLE regress_perm_member, regress_perm_inheritor, regress_perm_team;
DROP ROLE regress_perm_owner, regress_perm_worker, regress_perm_outsider;
