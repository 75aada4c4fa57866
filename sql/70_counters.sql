-- Counters: one value many transactions change at once, split into slots.
-- The API, the bounds (never crossed, nothing changed when refused), the
-- layout of a counter's slots, the view, the permissions, every error.

SELECT concurrency.create_counter('hits');
SELECT name, value, slots, min_value, max_value FROM concurrency.counters ORDER BY name;
SELECT concurrency.counter_add('hits', 5);
SELECT concurrency.counter_add('hits', 2.5);
SELECT concurrency.counter_add('hits', -10);   -- no min_value: may go below zero
SELECT concurrency.counter_add('hits', 0);
SELECT concurrency.counter_value('hits');
-- one add changes one slot
SELECT count(*) AS slots, count(*) FILTER (WHERE value <> 0) AS used FROM concurrency.counter_slot WHERE counter = 'hits';

-- inside the caller's transaction: rolled back with it
BEGIN;
SELECT concurrency.counter_add('hits', 100);
SELECT concurrency.counter_value('hits') AS inside;
ROLLBACK;
SELECT concurrency.counter_value('hits') AS after_rollback;

-- a stock: min_value 0; the bound is never crossed
SELECT concurrency.create_counter('stock', slots => 4, min_value => 0);
SELECT slot, value, floor, ceiling FROM concurrency.counter_slot WHERE counter = 'stock' ORDER BY slot;
SELECT concurrency.counter_add('stock', 10);
SELECT concurrency.counter_add('stock', -3);
SELECT concurrency.counter_value('stock');
\set VERBOSITY default
SELECT concurrency.counter_add('stock', -8);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT concurrency.counter_value('stock') AS unchanged;
SELECT concurrency.counter_add('stock', -7);
SELECT concurrency.counter_value('stock') AS sold_out;
\set VERBOSITY sqlstate
SELECT concurrency.counter_add('stock', -0.001);
\set VERBOSITY default
-- a withdrawal larger than any slot gathers from several, in ascending order
SELECT concurrency.counter_add('stock', 3) FROM generate_series(1, 4);
SELECT concurrency.compact_counter('stock');
SELECT slot, value FROM concurrency.counter_slot WHERE counter = 'stock' ORDER BY slot;
SELECT concurrency.counter_add('stock', -11);
SELECT slot, value FROM concurrency.counter_slot WHERE counter = 'stock' ORDER BY slot;
SELECT concurrency.counter_value('stock') AS one_left;

-- an overdraft limit: min_value -100 split over the slots, summing exactly
SELECT concurrency.create_counter('balance', slots => 16, min_value => -100);
SELECT sum(floor) AS floors, count(*) FILTER (WHERE floor IS NOT NULL) AS bounded FROM concurrency.counter_slot WHERE counter = 'balance';
SELECT concurrency.counter_add('balance', -100);
\set VERBOSITY sqlstate
SELECT concurrency.counter_add('balance', -1);
\set VERBOSITY default
SELECT concurrency.counter_value('balance') AS at_limit;

-- max_value: a capacity; deposits gather room from the slots
SELECT concurrency.create_counter('seats', slots => 3, max_value => 10);
SELECT slot, floor, ceiling FROM concurrency.counter_slot WHERE counter = 'seats' ORDER BY slot;
SELECT concurrency.counter_add('seats', 9);
\set VERBOSITY default
SELECT concurrency.counter_add('seats', 2);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SELECT concurrency.counter_add('seats', 1);
SELECT concurrency.counter_value('seats') AS full_house;
SELECT concurrency.counter_add('seats', -4);
SELECT concurrency.counter_value('seats');

-- both bounds
SELECT concurrency.create_counter('tank', slots => 4, min_value => 0, max_value => 1000);
SELECT sum(floor) AS floors, sum(ceiling) AS ceilings FROM concurrency.counter_slot WHERE counter = 'tank';
SELECT concurrency.counter_add('tank', 1000);
\set VERBOSITY sqlstate
SELECT concurrency.counter_add('tank', 0.5);
\set VERBOSITY default
SELECT concurrency.counter_add('tank', -999.5);
\set VERBOSITY sqlstate
SELECT concurrency.counter_add('tank', -1);
\set VERBOSITY default
SELECT concurrency.counter_value('tank') AS half_unit;

-- alter_counter keeps the value exactly, more slots or fewer
SELECT concurrency.counter_add('hits', 1) FROM generate_series(1, 40);
SELECT concurrency.counter_value('hits') AS before;
SELECT concurrency.alter_counter('hits', 3);
SELECT count(*) AS slots, sum(value) AS total FROM concurrency.counter_slot WHERE counter = 'hits';
SELECT concurrency.alter_counter('hits', 32);
SELECT count(*) AS slots, sum(value) AS total FROM concurrency.counter_slot WHERE counter = 'hits';
SELECT concurrency.compact_counter('hits');
SELECT count(*) FILTER (WHERE value <> 0) AS nonzero, sum(value) AS total FROM concurrency.counter_slot WHERE counter = 'hits';
SELECT concurrency.alter_counter('stock', 7);
SELECT concurrency.counter_value('stock') AS still_one, count(*) AS slots, sum(floor) AS floors
  FROM concurrency.counter_slot WHERE counter = 'stock';

-- the view
SELECT name, value, slots, min_value, max_value FROM concurrency.counters ORDER BY name;

-- bad input: the SQLSTATE, and nothing changed
\set VERBOSITY default
SELECT concurrency.counter_add('nosuch', 1);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
\set VERBOSITY sqlstate
SELECT concurrency.counter_value('nosuch');
SELECT concurrency.drop_counter('nosuch');
SELECT concurrency.alter_counter('nosuch', 4);
SELECT concurrency.compact_counter('nosuch');
SELECT concurrency.counter_add(NULL, 1);
SELECT concurrency.counter_add('hits', NULL);
SELECT concurrency.counter_value(NULL);
SELECT concurrency.create_counter(NULL);
SELECT concurrency.create_counter('x', NULL);
SELECT concurrency.create_counter('x', 0);
SELECT concurrency.create_counter('x', -1);
SELECT concurrency.create_counter('x', 1025);
SELECT concurrency.alter_counter('hits', 0);
SELECT concurrency.alter_counter('hits', NULL);
SELECT concurrency.create_counter('x', 4, 5, 1);
SELECT concurrency.create_counter('x', 4, 1, 5);
SELECT concurrency.create_counter('x', 4, -5, -1);
SELECT concurrency.create_counter('x', 4, 'NaN', NULL);
SELECT concurrency.create_counter('x', 4, NULL, 'Infinity');
SELECT concurrency.counter_add('hits', 'NaN');
SELECT concurrency.counter_add('hits', '-Infinity');
SELECT concurrency.create_counter('');
SELECT concurrency.create_counter(repeat('n', 201));
SELECT concurrency.create_counter('hits');
\set VERBOSITY default
-- beyond numeric's range: 22003, the value unchanged
SELECT concurrency.create_counter('huge', 1);
SELECT concurrency.counter_add('huge', 9e131071);
\set VERBOSITY sqlstate
SELECT concurrency.counter_add('huge', 9e131071);
\set VERBOSITY default
SELECT concurrency.counter_value('huge') = 9e131071 AS huge_unchanged;
SELECT concurrency.drop_counter('huge');
SELECT count(*) AS created FROM concurrency.counter WHERE name IN ('x', '');
SELECT concurrency.counter_value('hits') AS hits_unchanged;
SELECT concurrency.create_counter('x', 1, 0, 0);  -- a counter pinned at 0 is fine
SELECT concurrency.create_counter(repeat('n', 200), 1);
SELECT concurrency.drop_counter(repeat('n', 200));

-- permissions: 'use' adds and reads, 'read' reads; the owner holds all
CREATE ROLE regress_counter_owner;
CREATE ROLE regress_counter_user;
CREATE ROLE regress_counter_reader;
CREATE ROLE regress_counter_outsider;
GRANT EXECUTE ON FUNCTION concurrency.create_counter(text, integer, numeric, numeric) TO regress_counter_owner;
SET ROLE regress_counter_outsider;
\set VERBOSITY sqlstate
SELECT concurrency.create_counter('nope');
\set VERBOSITY default
SET ROLE regress_counter_owner;
SELECT concurrency.create_counter('credits', 2, min_value => 0);
SELECT concurrency.counter_add('credits', 50);
SELECT concurrency.grant_counter('credits', 'regress_counter_user', 'use');
SELECT concurrency.grant_counter('credits', 'regress_counter_reader', 'read');
SELECT concurrency.grant_counter('credits', 'regress_counter_reader', 'read');  -- twice is once
\set VERBOSITY sqlstate
SELECT concurrency.grant_counter('credits', 'regress_counter_user', 'manage');
SELECT concurrency.grant_counter('credits', 'no_such_role', 'use');
SELECT concurrency.grant_counter('credits', NULL, 'use');
\set VERBOSITY default
SELECT counter, grantee, permission FROM concurrency.counter_permission ORDER BY 1, 2, 3;
SET ROLE regress_counter_user;
SELECT concurrency.counter_add('credits', -20);
SELECT concurrency.counter_value('credits');
SELECT name, value FROM concurrency.counters;
\set VERBOSITY default
SELECT concurrency.alter_counter('credits', 4);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
\set VERBOSITY sqlstate
SELECT concurrency.grant_counter('credits', 'regress_counter_outsider', 'use');
SELECT concurrency.drop_counter('credits');
SELECT concurrency.counter_add('hits', 1);          -- not its counter
SELECT * FROM concurrency.counter_slot;             -- the tables are the extension's
UPDATE concurrency.counter_slot SET value = 1e6;
\set VERBOSITY default
SET ROLE regress_counter_reader;
SELECT concurrency.counter_value('credits');
SELECT name, value FROM concurrency.counters;
\set VERBOSITY default
SELECT concurrency.counter_add('credits', 1);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
SET ROLE regress_counter_outsider;
\set VERBOSITY sqlstate
SELECT concurrency.counter_value('credits');
\set VERBOSITY default
SELECT count(*) AS visible FROM concurrency.counters;
SET ROLE regress_counter_owner;
SELECT concurrency.revoke_counter('credits', 'regress_counter_user', 'use');
SELECT concurrency.grant_counter('credits', 'public', 'read');
SET ROLE regress_counter_user;
\set VERBOSITY sqlstate
SELECT concurrency.counter_add('credits', -1);
\set VERBOSITY default
SELECT concurrency.counter_value('credits') AS public_read;
SET ROLE regress_counter_owner;
SELECT concurrency.alter_counter('credits', 4);
SELECT concurrency.compact_counter('credits');
SELECT concurrency.drop_counter('credits');
RESET ROLE;
SELECT count(*) AS permissions_left FROM concurrency.counter_permission WHERE counter = 'credits';
REVOKE EXECUTE ON FUNCTION concurrency.create_counter(text, integer, numeric, numeric) FROM regress_counter_owner;
DROP ROLE regress_counter_owner, regress_counter_user, regress_counter_reader, regress_counter_outsider;

-- drop_counter takes the slots along
SELECT concurrency.drop_counter('hits');
SELECT count(*) AS slots_left FROM concurrency.counter_slot WHERE counter = 'hits';
SELECT concurrency.drop_counter(name) FROM concurrency.counter ORDER BY name;
SELECT count(*) AS counters_left FROM concurrency.counter;

-- One counter_add changes one slot, once, whatever plan the server chooses.
-- With many one-slot counters analyzed, the planner expects one slot per
-- counter and may rescan the subquery that picks a free slot (LIMIT 1, SKIP
-- LOCKED) once per slot of the counter: a rescan must not pick another slot.
-- The start slot depends on the backend's pid: three counters of 16, 17 and
-- 19 slots do not all start at their last slot.
SELECT count(*) AS single_slot_counters
  FROM (SELECT concurrency.create_counter('single_' || k, slots => 1) FROM generate_series(1, 200) AS k) AS c;
ANALYZE concurrency.counter_slot;
SELECT concurrency.create_counter('spread_' || n, slots => n, min_value => 0) FROM (VALUES (16), (17), (19)) AS v(n);
SELECT concurrency.counter_add('spread_' || n, 100) FROM (VALUES (16), (17), (19)) AS v(n);
SELECT counter, sum(value) AS value, count(*) FILTER (WHERE value <> 0) AS slots_changed
  FROM concurrency.counter_slot WHERE counter LIKE 'spread\_%' GROUP BY counter ORDER BY counter;
-- spread over the slots (at most 20 in one), a withdrawal of 25 gathers
-- from several, each once
SELECT concurrency.compact_counter('spread_' || n) FROM (VALUES (16), (17), (19)) AS v(n);
SELECT concurrency.counter_add('spread_' || n, -25) FROM (VALUES (16), (17), (19)) AS v(n);
SELECT counter, sum(value) AS value, bool_and(value >= 0) AS no_slot_below_zero
  FROM concurrency.counter_slot WHERE counter LIKE 'spread\_%' GROUP BY counter ORDER BY counter;
SELECT count(*) AS dropped
  FROM (SELECT concurrency.drop_counter(name) FROM concurrency.counter
         WHERE name LIKE 'spread\_%' OR name LIKE 'single\_%') AS d;
