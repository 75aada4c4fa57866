# Queues and their tasks survive pg_dump / pg_restore: the queue tables are
# ordinary tables in the extension's schema (not extension members), so they
# are dumped with their rows, owner, GRANTs and storage settings, and the
# queue catalog and the lease token sequence are extension configuration
# (pg_extension_config_dump). Retained tasks (done with their results,
# cancelled) and every queue setting (retain, key_limit, max_leased) come
# back too. After a restore the queues work, a lease taken
# before the dump can still be completed with its token, new tokens never
# repeat old ones, and DROP EXTENSION still refuses to take the tasks along.
# The names of a queue's indexes and identity sequence come back as they
# were: role first (ready_q_jobs) for a queue made since 0.4.0, table first
# (q_legacy_ready) for one made before, and both kinds work, beside queues
# whose names were each other's derived names before 0.4.0.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use DumpRestore;

my $node = PostgreSQL::Test::Cluster->new('queue_dump');
$node->init;
$node->start;

$node->safe_psql('postgres', q{
  CREATE ROLE app_producer;
  CREATE ROLE app_worker;
  CREATE EXTENSION concurrency_ext;
  SELECT concurrency.create_queue('emails', '45 seconds', 7);
  SELECT concurrency.create_queue('x";odd/**/name', '10 seconds', 2);
  GRANT SELECT, INSERT ON concurrency."q_emails" TO app_producer;
  GRANT SELECT, UPDATE, DELETE ON concurrency."q_emails" TO app_worker;

  -- tasks in every state
  SELECT concurrency.enqueue('emails', '{"to": "a@example.org"}');
  SELECT concurrency.enqueue('emails', '{"to": "b@example.org"}', priority => 3, dedupe_key => 'welcome-b');
  SELECT concurrency.enqueue('emails', '{"to": "c@example.org"}', run_at => now() + interval '1 day');
  SELECT concurrency.enqueue('emails', '{"to": "d@example.org"}');
  SELECT concurrency.enqueue('emails', '{"to": "e@example.org"}');
  SELECT concurrency.enqueue('x";odd/**/name', '{"odd": true}');

  -- a queue that retains finished tasks, with every setting
  SELECT concurrency.create_queue('kept', '1 minute', 3, retain => '7 days', key_limit => 2, max_leased => 5);
  SELECT concurrency.enqueue('kept', '{"order": 1}', dedupe_key => 'order-1', concurrency_key => 'customer-1');
  SELECT concurrency.enqueue('kept', '{"order": 2}', dedupe_key => 'order-2');
  SELECT concurrency.enqueue('kept', '{"order": 3}', concurrency_key => 'customer-3');
  SELECT concurrency.complete('kept', task_id, lease_token, '{"receipt": "r-1"}')
    FROM concurrency.dequeue('kept', worker => 'kept-worker');
  SELECT concurrency.cancel('kept', ARRAY[2]::bigint[]);

  -- a rate-limited queue whose one claim of the hour is used
  SELECT concurrency.create_queue('rated', rate_limit => 1, rate_period => '1 hour');
  SELECT concurrency.enqueue('rated', jsonb_build_object('n', n)) FROM generate_series(1, 3) n;
  SELECT count(*) FROM concurrency.dequeue('rated', 5);

  -- a fair queue: two tasks of key a, one of b
  SELECT concurrency.create_queue('turns');
  SELECT concurrency.alter_queue('turns', fair => true);
  SELECT concurrency.enqueue('turns', jsonb_build_object('k', k, 'n', n), concurrency_key => k)
    FROM (VALUES ('a', 1), ('a', 2), ('b', 1)) AS t(k, n);

  -- queue jobs's index was queue jobs_keyed's table before 0.4.0
  SELECT concurrency.create_queue(q, key_limit => 1) FROM unnest(ARRAY['jobs', 'jobs_keyed']) AS q;
  SELECT concurrency.enqueue(q, '{}', concurrency_key => 'k') FROM unnest(ARRAY['jobs', 'jobs_keyed']) AS q;
  -- a queue made before 0.4.0: its relations named table first, as then
  -- (upgrade-check makes one with 0.3.0's own code)
  SELECT concurrency.create_queue('legacy', key_limit => 1, key_rate_limit => 10, key_rate_period => '1 hour');
  DO $$
  DECLARE
      r record;
  BEGIN
      FOR r IN SELECT c.relname AS name, c.relkind AS kind, m[1] AS role, m[2] AS tbl
                 FROM pg_class c, regexp_match(c.relname, '^([a-z_]+)_((?:q|k|s|r|rk)_legacy)$') AS m
                WHERE c.relnamespace = 'concurrency'::regnamespace AND m IS NOT NULL
      LOOP
          EXECUTE format('ALTER %s concurrency.%I RENAME TO %I',
                         CASE r.kind WHEN 'S' THEN 'SEQUENCE' ELSE 'INDEX' END, r.name, r.tbl || '_' || r.role);
      END LOOP;
  END $$;
  SELECT concurrency.enqueue('legacy', jsonb_build_object('n', n), concurrency_key => 'k')
    FROM generate_series(1, 2) n;
});
# one claimed and kept (its holder will complete it after the restore), one failed for good
my ($held_id, $held_token) = split /\|/, $node->safe_psql('postgres',
	q{SELECT task_id, lease_token FROM concurrency.dequeue('emails', lease => '1 hour')});
my ($dead_id, $dead_token) = split /\|/, $node->safe_psql('postgres',
	q{SELECT task_id, lease_token FROM concurrency.dequeue('emails')});
$node->safe_psql('postgres',
	qq{UPDATE concurrency."q_emails" SET attempt = 7 WHERE id = $dead_id;
	   SELECT concurrency.fail('emails', $dead_id, $dead_token, 'mailbox full')});

my $tasks_sql = q{
  SELECT string_agg(format('%s|%s|%s|%s|%s|%s|%s|%s|%s', id, state, priority, attempt, payload, dedupe_key,
                           last_error, lease_token, run_at), E'\n' ORDER BY id)
    FROM concurrency."q_emails"};
my $odd_sql = q{SELECT string_agg(format('%s|%s|%s', id, state, payload), E'\n' ORDER BY id)
                  FROM concurrency."q_x"";odd/**/name"};
my $catalog_sql = q{SELECT string_agg(format('%s|%s|%s|%s|%s|%s|%s', name, lease, max_attempts, created_by, retain,
                                             key_limit, max_leased), E'\n' ORDER BY name)
                      FROM concurrency.queue};
my $kept_sql = q{
  SELECT string_agg(format('%s|%s|%s|%s|%s|%s|%s|%s', id, state, attempt, worker, result, dedupe_key,
                           concurrency_key, finished_at), E'\n' ORDER BY id)
    FROM concurrency."q_kept"};
my $grants_sql = q{
  SELECT string_agg(format('%s:%s', r, string_agg), ' ' ORDER BY r) FROM (
    SELECT r, string_agg(p, ',' ORDER BY p) FROM unnest(ARRAY['app_producer', 'app_worker']) AS r,
           unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) AS p
     WHERE has_table_privilege(r, 'concurrency."q_emails"', p) GROUP BY r) AS g};
my $names_sql = q{
  SELECT string_agg(relname, ' ' ORDER BY relname) FROM pg_class
   WHERE relnamespace = 'concurrency'::regnamespace AND relname ~ '(jobs|legacy)'};
my $storage_sql = q{
  SELECT c.reloptions::text || ' ' || (SELECT string_agg(i.relname, ',' ORDER BY i.relname)
                                         FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
                                        WHERE x.indrelid = c.oid)
    FROM pg_class c WHERE c.oid = 'concurrency."q_emails"'::regclass};

my %before = map { $_->[0] => $node->safe_psql('postgres', $_->[1]) }
  (['tasks', $tasks_sql], ['odd', $odd_sql], ['catalog', $catalog_sql], ['grants', $grants_sql],
	['storage', $storage_sql], ['kept', $kept_sql], ['names', $names_sql]);
like($before{names}, qr/\bid_seq_q_jobs\b.*\bready_q_jobs\b/, 'before: a queue of 0.4.0, named role first');
like($before{names}, qr/\bq_legacy_fair\b.*\bq_legacy_id_seq\b.*\bq_legacy_ready\b/,
	'before: a queue named as before 0.4.0, table first');
like($before{names}, qr/\bq_jobs_keyed\b/, 'before: queue jobs_keyed beside queue jobs');
like($before{kept}, qr/\|done\|1\|kept-worker\|\{"receipt": "r-1"\}\|order-1\|customer-1\|/,
	'before: a retained done task with its result');
like($before{kept}, qr/\|cancelled\|/, 'before: a retained cancelled task');
like($before{catalog}, qr/^kept\|00:01:00\|3\|\w+\|7 days\|2\|5$/m, 'before: the settings of queue kept');
like($before{tasks}, qr/\|leased\|/, 'before: a leased task');
like($before{tasks}, qr/\|dead\|.*mailbox full/, 'before: a dead task with its error');
like($before{tasks}, qr/\|scheduled\|/, 'before: a scheduled task');
my $max_token = $node->safe_psql('postgres', q{SELECT last_value FROM concurrency.lease_token});

for my $format ('custom', 'plain')
{
	my $db = "restored_$format";
	my ($ret, $out, $err);
	dump_and_restore($node, $node, $format, $db);

	is($node->safe_psql($db, $tasks_sql),   $before{tasks},   "$format: every task came back as it was");
	is($node->safe_psql($db, $odd_sql),     $before{odd},     "$format: the oddly named queue came back");
	is($node->safe_psql($db, $catalog_sql), $before{catalog}, "$format: the queue catalog came back");
	is($node->safe_psql($db, $grants_sql),  $before{grants},  "$format: the per-queue GRANTs came back");
	is($node->safe_psql($db, $storage_sql), $before{storage}, "$format: storage settings and indexes came back");
	is($node->safe_psql($db, $kept_sql),    $before{kept},    "$format: retained tasks came back with their results");
	is($node->safe_psql($db, $names_sql),   $before{names},   "$format: the names of indexes and sequences came back");
	is($node->safe_psql($db, q{SELECT concurrency.enqueue('kept', '{}', dedupe_key => 'order-1')}), '1',
		"$format: a retained done task still holds its dedupe key");
	is($node->safe_psql($db, q{SELECT state || ' ' || result::text FROM concurrency.task_status('kept', 1)}),
		'done {"receipt": "r-1"}', "$format: task_status reads the restored task");
	$node->safe_psql($db, q{SELECT concurrency.alter_queue('kept', retain => '0')});
	is($node->safe_psql($db, q{SELECT concurrency.purge('kept')}), '2',
		"$format: the restored finished tasks purge once retention is off");
	is($node->safe_psql($db, q{SELECT count(*) FROM pg_depend WHERE deptype = 'e'
	                             AND objid = 'concurrency."q_emails"'::regclass}),
		'0', "$format: the queue table is not an extension member");

	# the queue works: the holder of a lease taken before the dump completes it,
	# a new claim gets a token never issued before, enqueue continues the ids
	$node->safe_psql($db, "SELECT concurrency.complete('emails', $held_id, $held_token)");
	my ($claimed, $token) = split /\|/,
	  $node->safe_psql($db, q{SELECT task_id, lease_token FROM concurrency.dequeue('emails', 5)});
	ok($token > $max_token, "$format: new lease tokens continue after the old ones ($token > $max_token)");
	is($node->safe_psql($db, q{SELECT concurrency.enqueue('emails', '{}')}), '6', "$format: task ids continue");
	is($node->safe_psql($db, q{SELECT concurrency.enqueue('emails', '{}', dedupe_key => 'welcome-b')}),
		$node->safe_psql($db, q{SELECT id FROM concurrency."q_emails" WHERE dedupe_key = 'welcome-b'}),
		"$format: dedupe keys still hold");
	is($node->safe_psql($db, q{SELECT concurrency.retry_dead('emails')}), '1', "$format: the dead task can be retried");
	is($node->safe_psql($db, q{SELECT count(*) FROM concurrency.dequeue('rated', 5)}), '0',
		"$format: the rate limit came back with its used slot: no claim in the hour");
	$node->safe_psql($db, q{SELECT concurrency.alter_queue('rated', rate_limit => 2)});
	is($node->safe_psql($db, q{SELECT count(*) FROM concurrency.dequeue('rated', 5)}), '1',
		"$format: and alter_queue changes it: one more claim");
	is($node->safe_psql($db, q{SELECT fair FROM concurrency.queue WHERE name = 'turns'}), 't',
		"$format: the fair queue is fair");
	is($node->safe_psql($db, q{SELECT to_regclass('concurrency.fair_q_turns') IS NOT NULL}), 't',
		"$format: with its index");
	is($node->safe_psql($db,
			q{SELECT string_agg(d.payload ->> 'k', ' ' ORDER BY g)
			    FROM generate_series(1, 3) g, LATERAL concurrency.dequeue('turns', 1 + 0 * g) d}),
		'a b a', "$format: and its claims take turns between keys");

	# both kinds of names work: the claims find the indexes under either name
	for my $q ('jobs', 'jobs_keyed', 'legacy')
	{
		is($node->safe_psql($db, qq{
			SELECT count(concurrency.complete('$q', task_id, lease_token)) FROM concurrency.dequeue('$q', 5)}),
			'1', "$format: queue $q claims its keyed task (key_limit 1)");
	}
	is($node->safe_psql($db, q{
		SELECT count(concurrency.complete('legacy', task_id, lease_token)) FROM concurrency.dequeue('legacy', 5)}),
		'1', "$format: and the key's next task then");
	$node->safe_psql($db, q{SELECT concurrency.alter_queue('legacy', key_rate_limit => 0)});
	is($node->safe_psql($db, q{SELECT to_regclass('concurrency.q_legacy_fair') IS NULL}), 't',
		"$format: the fair index of the queue made before 0.4.0 is found under its name and dropped");
	($ret, $out, $err) = $node->psql($db, q{SELECT concurrency.create_queue('legacy_keyed')});
	like($err, qr/ERROR:  cannot create queue "legacy_keyed".*\n.*It is an index of queue "legacy"/,
		"$format: a queue whose table would have the name of its index is refused, naming it");

	# DROP EXTENSION still refuses while queues hold tasks
	($ret, $out, $err) = $node->psql($db, 'DROP EXTENSION concurrency_ext');
	isnt($ret, 0, "$format: DROP EXTENSION refuses");
	like($err, qr/cannot drop extension concurrency_ext because other objects depend on it/,
		"$format: ... because the queue tables depend on its schema");
}

$node->stop;
done_testing();
