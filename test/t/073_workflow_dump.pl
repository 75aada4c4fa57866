# pg_dump / pg_restore keep durable workflows: a task's steps, a sleeping
# task, a task parked for an event with its wait, an emitted event, and a
# finally-child, in the custom and the plain format; after the restore the
# emit wakes the parked task, the event emitted before is taken, and the
# steps are read by the next holder.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DumpRestore;

my $node = PostgreSQL::Test::Cluster->new('workflow_dump');
$node->init;
$node->start;

$node->safe_psql('postgres', q{
  CREATE EXTENSION concurrency_ext;
  SELECT concurrency.create_queue('wd');
  SELECT concurrency.enqueue('wd', '{"kind": "sleeper"}');
  SELECT concurrency.enqueue('wd', '{"kind": "parked"}');
  CREATE TABLE held AS SELECT task_id, lease_token, payload->>'kind' AS kind FROM concurrency.dequeue('wd', 2);
  SELECT concurrency.record_step('wd', task_id, lease_token, 'charge', jsonb_build_object('kind', kind)) FROM held;
  SELECT concurrency.sleep_task('wd', task_id, lease_token, now() + interval '1 hour') FROM held WHERE kind = 'sleeper';
  SELECT status FROM held, concurrency.await_event('wd', task_id, lease_token, 'reply') WHERE kind = 'parked';
  SELECT concurrency.emit_event('early', '{"e": 1}');
  SELECT count(*) FROM concurrency.enqueue_graph('wd', '[{"ref": "p", "payload": {"kind": "parent"}},
                                                         {"ref": "c", "payload": {"kind": "callback"}, "after_ends": ["p"]}]');
});

my $state = q{
  SELECT string_agg(format('%s:%s:%s:%s:%s', payload->>'kind', state, attempt, steps - 'x', awaiting), ';' ORDER BY id)
         || ' / ' || (SELECT string_agg(format('%s:%s', event, queue), ';') FROM concurrency.event_wait)
         || ' / ' || (SELECT string_agg(format('%s:%s:%s', name, payload, emitted_at IS NOT NULL), ';' ORDER BY name) FROM concurrency.event)
    FROM concurrency."q_wd"};
my $before = $node->safe_psql('postgres', $state);
like($before, qr/parked:scheduled:0:.*:reply/, 'the parked task waits for its event');

for my $format ('custom', 'plain')
{
	my $db = "restored_$format";
	dump_and_restore($node, $node, $format, $db);
	is($node->safe_psql($db, $state), $before, "$format: steps, waits and events are back");
	is($node->safe_psql($db, q{SELECT concurrency.emit_event('reply', '"yes"')}), '1',
		"$format: the emit wakes the restored parked task");
	my $out = $node->safe_psql($db, q{
	  WITH d AS MATERIALIZED (SELECT * FROM concurrency.dequeue('wd', 5)),
	       p AS MATERIALIZED (SELECT * FROM d WHERE payload->>'kind' = 'parked')
	  SELECT e.status || ':' || e.payload::text || ':' || concurrency.step_result('wd', p.task_id, p.lease_token, 'charge')::text
	    FROM p, concurrency.await_event('wd', p.task_id, p.lease_token, 'early') AS e});
	is($out, 'received:{"e": 1}:{"kind": "parked"}', "$format: the event emitted before the dump is taken, the step is read");
}

$node->stop;
done_testing();
