# dequeue(…, wait) with the module preloaded: commits wake waiters through
# shared memory (no polling: the poll interval is an hour here), a commit
# of n tasks wakes n of 50 waiters and the others keep sleeping,
# pg_cancel_backend ends a sleeping waiter, and a fast shutdown with 50
# waiters ends them all, leaving no lease behind. A paused queue stays
# paused across a restart; its waiters sleep through enqueues and are woken
# by resume_queue's commit. A call whose wait passes with no wake-up looks
# at the queue once, not again at its end. A waiter whose client is killed
# ends at the next client_connection_check_interval, holding no lease. A
# sleeping waiter holds no row of a lease a heartbeat extended.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run ();

my $node = PostgreSQL::Test::Cluster->new('wait');
$node->init;
$node->append_conf(
	'postgresql.conf', q(
shared_preload_libraries = 'concurrency_ext'
concurrency.wait_poll_interval = '1h'
max_connections = 80
autovacuum = off
));
$node->start;
$node->safe_psql('postgres', q(
CREATE EXTENSION concurrency_ext;
SELECT concurrency.create_queue('tw');
));

my $waiting_sql = q{SELECT count(*) FROM pg_stat_activity
 WHERE state = 'active' AND wait_event_type = 'Extension' AND query LIKE '%concurrency.dequeue(''tw''%'};

# Starts n sessions, each in a dequeue that waits up to an hour.
my @sessions;
sub start_waiters {
	my ($n) = @_;
	for (1 .. $n) {
		my $s = $node->background_psql('postgres', on_error_stop => 0);
		$s->{stdin} .= "SELECT count(*) AS got FROM concurrency.dequeue('tw', wait => '1 hour');\n";
		$s->{run}->pump_nb;
		push @sessions, $s;
	}
}

start_waiters(50);
$node->poll_query_until('postgres', "SELECT ($waiting_sql) = 50") or die "the 50 waiters do not wait";
pass('50 waiters sleep');

# one commit of 5 tasks: 5 waiters claim them, 45 sleep on
$node->safe_psql('postgres',
	q(SELECT count(*) FROM concurrency.enqueue_batch('tw', array_fill('{}'::jsonb, ARRAY[5]))));
$node->poll_query_until('postgres', q(SELECT leased = 5 FROM concurrency.queue_stats WHERE queue = 'tw'))
  or die 'the 5 tasks were not claimed';
$node->poll_query_until('postgres', "SELECT ($waiting_sql) = 45") or die 'the woken waiters did not return';
is($node->safe_psql('postgres', $waiting_sql), '45', 'a commit of 5 tasks woke 5 of 50 waiters, 45 sleep on');
is($node->safe_psql('postgres', q(SELECT count(DISTINCT lease_token) || ' ' || max(attempt) FROM concurrency."q_tw")),
	'5 1', 'each task claimed once');

# pg_cancel_backend during the sleep ends the call; it holds no lease
my $cancelled = $node->background_psql('postgres', on_error_stop => 0);
$cancelled->query_safe("SET application_name = 'cancelled_waiter'");
$cancelled->{stdin} .= "SELECT count(*) FROM concurrency.dequeue('tw', wait => '1 hour');\n";
$cancelled->{run}->pump_nb;
$node->poll_query_until('postgres',
	q(SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'cancelled_waiter' AND wait_event_type = 'Extension'))
  or die 'the waiter to cancel does not wait';
$node->safe_psql('postgres',
	q(SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'cancelled_waiter'));
$node->poll_query_until('postgres',
	q(SELECT state = 'idle' FROM pg_stat_activity WHERE application_name = 'cancelled_waiter'))
  or die 'the cancelled waiter did not stop';
like($cancelled->query('SELECT 1'), qr/^1$/m, 'the cancelled session is usable');
like($cancelled->{stderr}, qr/canceling statement due to user request/, 'pg_cancel_backend ended the wait');
$cancelled->quit;
is($node->safe_psql('postgres', q(SELECT leased FROM concurrency.queue_stats WHERE queue = 'tw')),
	'5', 'the cancelled waiter holds no lease');

# 50 waiters again, then a fast shutdown
start_waiters(5);
$node->poll_query_until('postgres', "SELECT ($waiting_sql) = 50") or die 'the 50 waiters do not wait';
$node->stop('fast');
pass('a fast shutdown with 50 waiters finished');
for my $s (@sessions) {
	eval { $s->quit };
}

$node->start;
is($node->safe_psql('postgres', q(SELECT leased || ' ' || ready FROM concurrency.queue_stats WHERE queue = 'tw')),
	'5 0', 'no lease left by the waiters that were shut down');
$node->safe_psql('postgres', q(SELECT concurrency.enqueue('tw', '{}')));
is($node->safe_psql('postgres', q(SELECT count(*) FROM concurrency.dequeue('tw', wait => '1 minute'))),
	'1', 'after the restart a waiter claims a new task');

# pause_queue: kept across a restart (a column of the catalog)
$node->safe_psql('postgres', q(
SELECT concurrency.create_queue('tp');
SELECT concurrency.pause_queue('tp');
SELECT count(*) FROM concurrency.enqueue_batch('tp', array_fill('{}'::jsonb, ARRAY[3]));
));
$node->restart;
is($node->safe_psql('postgres', q(SELECT paused || ' ' || ready FROM concurrency.queue_stats WHERE queue = 'tp')),
	'true 3', 'a pause survives a restart');
is($node->safe_psql('postgres', q(SELECT count(*) FROM concurrency.dequeue('tp', batch => 10))),
	'0', 'after the restart the paused queue gives nothing');

# waiters on the paused queue sleep on through an enqueue's commit, and the
# resume's commit wakes them (the poll interval and their waits are an hour)
my $paused_sql = q{SELECT count(*) FROM pg_stat_activity
 WHERE state = 'active' AND wait_event_type = 'Extension' AND query LIKE '%concurrency.dequeue(''tp''%'};
my @paused;
for (1 .. 3) {
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->{stdin} .= "SELECT count(*) AS got FROM concurrency.dequeue('tp', wait => '1 hour');\n";
	$s->{run}->pump_nb;
	push @paused, $s;
}
$node->poll_query_until('postgres', "SELECT ($paused_sql) = 3") or die 'the waiters on the paused queue do not wait';
$node->safe_psql('postgres', q(SELECT concurrency.enqueue('tp', '{}')));
$node->poll_query_until('postgres', "SELECT ($paused_sql) = 3") or die 'a waiter on the paused queue left';
is($node->safe_psql('postgres', q(SELECT leased || ' ' || ready FROM concurrency.queue_stats WHERE queue = 'tp')),
	'0 4', 'an enqueue into the paused queue: its waiters claim nothing');
$node->safe_psql('postgres', q(SELECT concurrency.resume_queue('tp')));
$node->poll_query_until('postgres', q(SELECT leased = 3 FROM concurrency.queue_stats WHERE queue = 'tp'))
  or die 'the resume woke no waiter';
$node->poll_query_until('postgres', "SELECT ($paused_sql) = 0") or die 'the woken waiters did not return';
pass('the resume woke the 3 waiters of the paused queue, each claimed a task');
for my $s (@paused) {
	eval { $s->quit };
}

# A wait that passes with no wake-up: one look at the queue (its scans as the
# transaction's statistics count them), as a call without wait makes, plus
# the probe for the next due time (three index scans: the first scheduled
# task, the first lease whose indexed deadline is ahead, the leases past
# theirs); not a second look at its end, which the caller's next call makes
# anyway.
my $looks = $node->safe_psql('postgres', q(
SELECT concurrency.create_queue('tl');
BEGIN;
CREATE TEMP TABLE scans (step text, n bigint);
SELECT count(*) FROM concurrency.dequeue('tl');
INSERT INTO scans SELECT 'first', sum(idx_scan + seq_scan) FROM pg_stat_xact_user_tables WHERE relname LIKE '%\_tl';
SELECT count(*) FROM concurrency.dequeue('tl');
INSERT INTO scans SELECT 'plain', sum(idx_scan + seq_scan) FROM pg_stat_xact_user_tables WHERE relname LIKE '%\_tl';
SELECT count(*) FROM concurrency.dequeue('tl', wait => '100 ms');
INSERT INTO scans SELECT 'waited', sum(idx_scan + seq_scan) FROM pg_stat_xact_user_tables WHERE relname LIKE '%\_tl';
SELECT (w.n - p.n) || ' ' || (p.n - f.n)
  FROM scans f, scans p, scans w WHERE f.step = 'first' AND p.step = 'plain' AND w.step = 'waited';
COMMIT;
));
my ($waited, $plain) = split / /, (split /\n/, $looks)[-1];
ok($plain > 0 && $waited <= $plain + 3,
	"a wait that passed unwoken looked once ($waited scans; a call without wait: $plain)");

# Waiters whose clients die: with client_connection_check_interval the
# backend notices during its sleep and ends; without it, it waits on (it has
# nothing to send before its wait passes).
my $lost_sql = q{SELECT count(*) FROM pg_stat_activity
 WHERE wait_event_type = 'Extension' AND query LIKE '%concurrency.dequeue(''tl''%'};
my @clients;
for my $options ('', " options='-cclient_connection_check_interval=100'") {
	push @clients,
	  IPC::Run::start(
		[ 'psql', '-X', '-q', '-d', $node->connstr('postgres') . $options, '-c',
		  "SELECT count(*) FROM concurrency.dequeue('tl', wait => '1 hour')" ],
		'>', \my $out, '2>', \my $err);
	my $n = scalar @clients;
	$node->poll_query_until('postgres', "SELECT ($lost_sql) = $n") or die "waiter $n does not wait";
}
my $unchecked = $node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity
 WHERE wait_event_type = 'Extension' AND query LIKE '%concurrency.dequeue(''tl''%'

 ORDER BY backend_start LIMIT 1}); # the first: started without the setting
for my $h (@clients) {
	$h->signal('KILL');
	eval { $h->finish };
}
$node->poll_query_until('postgres', "SELECT ($lost_sql) = 1")
  or die 'the waiter of a killed client with client_connection_check_interval did not end';
is($node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity
 WHERE wait_event_type = 'Extension' AND query LIKE '%concurrency.dequeue(''tl''%'}),
	$unchecked, 'with client_connection_check_interval a killed client\'s waiter ended; without it, it waits on');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($unchecked)");
$node->poll_query_until('postgres', "SELECT ($lost_sql) = 0") or die 'the other waiter did not end';
is($node->safe_psql('postgres', q(SELECT leased FROM concurrency.queue_stats WHERE queue = 'tl')),
	'0', 'neither holds a lease');

# A sleeping waiter holds no row of a lease that a heartbeat extended past
# its indexed deadline: the holder's heartbeat and complete go through at
# once. (Before, the waiter's wake-up moved the extended deadline into the
# index and kept the row locked while it slept: the heartbeat waited for
# the waiter, and the lease lapsed meanwhile.) The extended lease is made
# directly, as HOT heartbeats that outran the indexed deadline leave it.
$node->safe_psql('postgres', q(
SELECT concurrency.create_queue('th', lease => '1 hour');
SELECT concurrency.enqueue('th', '{}');
));
my ($held_task, $held_token) =
  split /\|/, $node->safe_psql('postgres', q(SELECT task_id, lease_token FROM concurrency.dequeue('th')));
$node->safe_psql('postgres', q(UPDATE concurrency."q_th"
   SET lease_expires_at = clock_timestamp() - interval '1 minute',
       lease_extended_to = clock_timestamp() + interval '1 hour'));
my $th_sql = q{SELECT count(*) FROM pg_stat_activity
 WHERE state = 'active' AND wait_event_type = 'Extension' AND query LIKE '%concurrency.dequeue(''th''%'};
my $sleeper = $node->background_psql('postgres', on_error_stop => 0);
$sleeper->{stdin} .= "SELECT count(*) AS got FROM concurrency.dequeue('th', wait => '1 hour');\n";
$sleeper->{run}->pump_nb;
$node->poll_query_until('postgres', "SELECT ($th_sql) = 1") or die 'the waiter on th does not wait';
# a heartbeat that waited for the sleeping waiter would fail here (55P03)
my ($rc, $out, $err) = $node->psql('postgres',
	"SET lock_timeout = '5s'; SELECT concurrency.heartbeat('th', $held_task, $held_token) > now();"
	  . " SELECT concurrency.complete('th', $held_task, $held_token);");
is("$rc $out", "0 t\n", 'beside a sleeping waiter, the holder of an extended lease heartbeats and completes at once');
is($err, '', 'without waiting for a lock');
is($node->safe_psql('postgres', "SELECT ($th_sql)"), '1', 'the waiter sleeps on, having claimed nothing');
$node->safe_psql('postgres', q(SELECT concurrency.enqueue('th', '{}')));
$node->poll_query_until('postgres', "SELECT ($th_sql) = 0") or die 'the waiter on th was not woken';
like($sleeper->query('SELECT 1'), qr/^1$/m, 'the woken waiter returned');
$sleeper->quit;
is($node->safe_psql('postgres', q(SELECT leased || ' ' || ready FROM concurrency.queue_stats WHERE queue = 'th')),
	'1 0', 'it claimed the new task');

$node->stop;
done_testing();
