# All three capabilities on a streaming hot standby, side by side:
#  - named locks are refused with 25006 (a lock there excludes nobody on the
#    primary), try-locks too, and nothing is left held;
#  - every queue write fails cleanly with 25006 and changes nothing; reading
#    queue_stats works;
#  - the diagnostics views work.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->start;
$primary->safe_psql('postgres', q{
CREATE EXTENSION concurrency_ext;
SELECT concurrency.register_subsystem('relay', 7701);
SELECT concurrency.create_queue('jobs');
SELECT concurrency.enqueue('jobs', '{"n": 1}');
SELECT concurrency.enqueue('jobs', '{"n": 2}');
});
my ($task, $token) = split /\|/, $primary->safe_psql('postgres',
	q{SELECT task_id, lease_token FROM concurrency.dequeue('jobs', lease => '1 hour')});
$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'the standby is in recovery');

# Runs $sql on the standby; returns its SQLSTATE ('' when it succeeded).
sub sqlstate_of {
	my ($sql) = @_;
	my ($rc, $out, $err) = $standby->psql('postgres',
		"\\set VERBOSITY verbose\n$sql", on_error_stop => 1);
	return '' if $rc == 0;
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : "unparsed: $err";
}

# --- named locks ------------------------------------------------------------
for my $call (
	q{SELECT concurrency.xact_lock('relay')},
	q{SELECT concurrency.try_xact_lock('relay')},
	q{SELECT concurrency.try_xact_lock('relay', 42)},
	q{SELECT concurrency.session_lock('relay')},
	q{SELECT concurrency.try_session_lock('relay', 1)},
	q{SELECT concurrency.xact_lock(ARRAY['relay'])})
{
	is(sqlstate_of($call), '25006', "standby refuses: $call");
}
is($standby->safe_psql('postgres', q{SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'}),
	'0', 'no advisory lock is left held on the standby');

# --- the queue --------------------------------------------------------------
for my $call (
	q{SELECT concurrency.enqueue('jobs', '{}')},
	q{SELECT * FROM concurrency.enqueue_batch('jobs', ARRAY['{}']::jsonb[])},
	q{SELECT * FROM concurrency.dequeue('jobs')},
	"SELECT concurrency.heartbeat('jobs', $task, $token)",
	"SELECT concurrency.complete('jobs', $task, $token)",
	"SELECT concurrency.fail('jobs', $task, $token, 'x')",
	q{SELECT concurrency.retry_dead('jobs')},
	q{SELECT concurrency.create_queue('other')},
	q{SELECT concurrency.drop_queue('jobs')})
{
	is(sqlstate_of($call), '25006', "standby refuses: $call");
}
is($standby->safe_psql('postgres', q{SELECT ready || '/' || leased FROM concurrency.queue_stats WHERE queue = 'jobs'}),
	'1/1', 'queue_stats reads on the standby, and the refused calls changed nothing');

# --- diagnostics ------------------------------------------------------------
is(sqlstate_of(q{SELECT * FROM concurrency.lock_waits}), '', 'lock_waits works on the standby');
is(sqlstate_of(q{SELECT * FROM concurrency.lock_tree}), '', 'lock_tree works on the standby');
is(sqlstate_of(q{SELECT * FROM concurrency.held_locks}), '', 'held_locks works on the standby');

# the primary is untouched by all of it: the lease is still the worker's
is($primary->safe_psql('postgres', "SELECT concurrency.complete('jobs', $task, $token)"), '',
	'the lease taken on the primary is still valid there');

$standby->stop;
$primary->stop;
done_testing();
