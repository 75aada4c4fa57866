# Durable workflows with the module preloaded and waiters never polling
# (concurrency.wait_poll_interval = 1h): an await_task sleeping in its wait is
# woken by the commit that completes the task (and not by a commit that
# ends nothing); a task's steps, a sleeping task and a task parked for an
# event survive an immediate server restart (a crash), after which the sleep
# ends at its time, the emit wakes the parked task, and the steps are read
# by the next holder; an emitted event survives it too.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('workflows');
$node->init;
$node->append_conf(
	'postgresql.conf', q(
shared_preload_libraries = 'concurrency_ext'
concurrency.wait_poll_interval = '1h'
autovacuum = off
));
$node->start;
$node->safe_psql('postgres', q(
CREATE EXTENSION concurrency_ext;
SELECT concurrency.create_queue('tw');
));

# Claims a task of tw: (id, token).
sub claim {
	my $row = $node->safe_psql('postgres', q(SELECT task_id || ',' || lease_token FROM concurrency.dequeue('tw')));
	return split /,/, $row;
}

# --- await_task sleeps until the completing commit wakes it ---
my $id = $node->safe_psql('postgres', q(SELECT concurrency.enqueue('tw', '{"n": 1}')));
my (undef, $token) = claim();
my $awaiter = $node->background_psql('postgres');
$awaiter->query_safe("SET application_name = 'awaiter'");
$awaiter->{stdin} .= "SELECT 'ended:' || state || ':' || result::text FROM concurrency.await_task('tw', $id, wait => '1 hour');\n";
$awaiter->{run}->pump_nb;
$node->poll_query_until('postgres',
	q(SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'awaiter' AND wait_event_type = 'Extension'))
  or die 'await_task does not sleep';
# a commit that ends no task of the queue, and a heartbeat of this one, wake nobody
$node->safe_psql('postgres', qq(SELECT concurrency.enqueue('tw', '{"other": 1}');
SELECT concurrency.heartbeat('tw', $id, $token)));
is($node->safe_psql('postgres',
		q(SELECT count(*) FROM pg_stat_activity WHERE application_name = 'awaiter' AND wait_event_type = 'Extension')),
	'1', 'await_task sleeps on through commits that end nothing');
$node->safe_psql('postgres', qq(SELECT concurrency.complete('tw', $id, $token, '{"shipped": true}')));
$awaiter->{timeout}->start($PostgreSQL::Test::Utils::timeout_default) if $awaiter->{timeout};
$awaiter->{run}->pump until $awaiter->{stdout} =~ /ended:/ || $awaiter->{stderr} =~ /ERROR/;
like($awaiter->{stdout}, qr/ended:done:\{"shipped": true\}/, 'await_task returns the result at the completing commit');
$awaiter->quit;

# --- steps, a sleeping task and a parked task survive a crash ---
$node->safe_psql('postgres', q(SELECT concurrency.purge('tw'); DELETE FROM concurrency."q_tw"));
my $sleeper = $node->safe_psql('postgres', q(SELECT concurrency.enqueue('tw', '{"kind": "sleeper"}')));
my (undef, $s_token) = claim();
$node->safe_psql('postgres', qq(SELECT concurrency.record_step('tw', $sleeper, $s_token, 'charge', '{"charge": 7}');
SELECT concurrency.sleep_task_for('tw', $sleeper, $s_token, '3 seconds')));
my $parked = $node->safe_psql('postgres', q(SELECT concurrency.enqueue('tw', '{"kind": "parked"}')));
my (undef, $p_token) = claim();
$node->safe_psql('postgres', qq(SELECT concurrency.record_step('tw', $parked, $p_token, 'receipt', '"sent"')));
is($node->safe_psql('postgres', qq(SELECT status FROM concurrency.await_event('tw', $parked, $p_token, 'reply-$parked'))),
	'waiting', 'the task parks for its event');
$node->safe_psql('postgres', q(SELECT concurrency.emit_event('early', '{"e": 1}')));

$node->stop('immediate');
$node->start;

is($node->safe_psql('postgres', q(SELECT count(*) FROM concurrency.dequeue('tw'))), '0',
	'after the crash: nothing claimable before its time or event');
is($node->safe_psql('postgres', qq(SELECT concurrency.emit_event('reply-$parked', '{"reply": "yes"}'))), '1',
	'the emit after the crash wakes the parked task');
$node->poll_query_until('postgres', qq(SELECT run_at <= clock_timestamp() FROM concurrency."q_tw" WHERE id = $sleeper))
  or die 'the sleep does not end';
my %seen;
for (1 .. 2) {
	my ($task, $tok) = claim();
	my $kind = $node->safe_psql('postgres', qq(SELECT payload->>'kind' FROM concurrency."q_tw" WHERE id = $task));
	$seen{$kind} = [$task, $tok];
}
ok($seen{sleeper} && $seen{parked}, 'both tasks are claimed again');
is($node->safe_psql('postgres', qq(SELECT concurrency.step_result('tw', $sleeper, $seen{sleeper}[1], 'charge'))),
	'{"charge": 7}', "the sleeper's step survived the crash");
is($node->safe_psql('postgres', qq(SELECT attempt FROM concurrency."q_tw" WHERE id = $sleeper)), '1',
	'the sleep spent no attempt');
is($node->safe_psql('postgres', qq(SELECT concurrency.step_result('tw', $parked, $seen{parked}[1], 'receipt'))),
	'"sent"', "the parked task's step survived the crash");
is($node->safe_psql('postgres',
		qq(SELECT status || ':' || payload::text FROM concurrency.await_event('tw', $parked, $seen{parked}[1], 'reply-$parked'))),
	'received:{"reply": "yes"}', 'the parked task takes the payload emitted after the crash');
is($node->safe_psql('postgres',
		qq(SELECT status || ':' || payload::text FROM concurrency.await_event('tw', $sleeper, $seen{sleeper}[1], 'early'))),
	'received:{"e": 1}', 'an event emitted before the crash is taken after it');

done_testing();
