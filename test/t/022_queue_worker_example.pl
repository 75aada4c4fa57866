# The worker example (examples/worker.py, on the Python runtime in
# clients/python) against a real server: its set-up step
# (examples/worker_setup.sql) creates what it needs, several workers drain a
# queue with every task done exactly once, heartbeats keep a task longer than
# its lease, a failing task ends dead, a role with only `work` on the queue
# drains it (--drain ends on an empty claim, without queue_stats, which that
# role cannot read), SIGTERM finishes the task in hand and spends no attempt
# on the others, and a worker frozen past its lease (SIGSTOP) is fenced off
# when it wakes up: its complete raises CE001 and its write rolls back.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $python = -x '/usr/bin/python3' ? '/usr/bin/python3' : 'python3';
system($python, '-c', 'import psycopg') == 0
  or BAIL_OUT('python3-psycopg is missing: run scripts/deps.sh');

my $node = PostgreSQL::Test::Cluster->new('queue_worker');
$node->init;
$node->start;
my $conninfo = $node->connstr('postgres');
my $timeout  = $PostgreSQL::Test::Utils::timeout_default;

$node->safe_psql('postgres', q{
  CREATE EXTENSION concurrency_ext;
  SELECT concurrency.create_queue('emails', lease => '1 second', max_attempts => 1);
  CREATE ROLE mailer_worker LOGIN;
});
# the set-up step, as its header says to run it
$node->command_ok([ 'psql', '-X', '-v', 'ON_ERROR_STOP=1', '-v', 'queue=emails', '-v', 'worker_role=mailer_worker',
	'-f', 'examples/worker_setup.sql', '-d', $conninfo ], 'examples/worker_setup.sql ran');
my $has_release = $node->safe_psql('postgres',
	q{SELECT count(*) FROM pg_proc WHERE proname = 'release' AND pronamespace = 'concurrency'::regnamespace});

sub worker
{
	my ($name, @args) = @_;
	my %w = (name => $name, out => '', err => '');
	$w{timer} = IPC::Run::timer($timeout);
	$w{h} = IPC::Run::start(
		[ $python, 'examples/worker.py', '--queue', 'emails', '--name', $name, '--poll', '0.2',
		  '--wait', '0.5', '--conninfo', $conninfo, @args ],
		'<', \undef, '>', \$w{out}, '2>', \$w{err}, $w{timer});
	return \%w;
}

sub wait_output
{
	my ($w, $re) = @_;
	$w->{h}->pump until $w->{out} =~ $re || $w->{timer}->is_expired;
	return $w->{out} =~ $re;
}

sub finish
{
	my ($w) = @_;
	$w->{h}->finish;
	return $w->{h}->result(0);
}

# --- several workers drain a queue ------------------------------------------
$node->safe_psql('postgres', q{
  SELECT count(*) FROM concurrency.enqueue_batch('emails',
    (SELECT array_agg(jsonb_build_object('n', i, 'sleep', 0.02)) FROM generate_series(1, 30) AS i));
  SELECT concurrency.enqueue('emails', '{"long": true, "sleep": 2.5}');
  SELECT concurrency.enqueue('emails', '{"fail": "bad address"}');
});
my @drainers = map { worker("w$_", '--drain', ($_ == 3 ? ('--batch', '5') : ())) } 1 .. 3;
for my $w (@drainers)
{
	is(finish($w), 0, "$w->{name} drained the queue and exited 0");
	like($w->{out}, qr/$w->{name}: queue is empty\n$w->{name}: stopped\n\z/, "$w->{name} said why it stopped");
	is($w->{err}, '', "$w->{name} wrote nothing to stderr");
}
is($node->safe_psql('postgres',
		q{SELECT count(*) || ' ' || count(DISTINCT task_id) FROM worker_results}),
	'31 31', 'every task that could succeed was done exactly once');
is($node->safe_psql('postgres', q{SELECT attempt FROM worker_results WHERE payload ? 'long'}),
	'1', 'heartbeats kept the 2.5 s task past its 1 s lease: no second attempt');
is($node->safe_psql('postgres', q{SELECT state || ' ' || attempt || ' ' || last_error FROM concurrency."q_emails"}),
	'dead 1 RuntimeError: payload asked to fail: bad address', 'the failing task is dead with its error');
$node->safe_psql('postgres', q{DELETE FROM concurrency."q_emails"; TRUNCATE worker_results});

# --- a role with only `work` on the queue (and INSERT on the results) -----------
$node->safe_psql('postgres', q{
  SELECT count(*) FROM concurrency.enqueue_batch('emails',
    (SELECT array_agg(jsonb_build_object('n', i)) FROM generate_series(1, 10) AS i));
});
my $least = worker('least', '--drain', '--conninfo', "$conninfo user=mailer_worker");
is(finish($least), 0, 'a work-only role drained the queue and exited 0');
like($least->{out}, qr/least: queue is empty\nleast: stopped\n\z/, 'it ended on an empty claim');
is($least->{err}, '', 'it wrote nothing to stderr (no CREATE TABLE, no queue_stats)');
is($node->safe_psql('postgres', q{SELECT count(DISTINCT task_id) FROM worker_results WHERE worker = 'least'}),
	'10', 'every task done by the work-only role');
$node->safe_psql('postgres', q{DELETE FROM concurrency."q_emails"; TRUNCATE worker_results});

# --- SIGTERM: the task in hand is finished, no attempt spent on the others -----
# With release on the server a batch of 5 is claimed and the 4 not started are
# handed back; without it, one task is claimed at a time.
$node->safe_psql('postgres', q{
  SELECT count(*) FROM concurrency.enqueue_batch('emails',
    (SELECT array_agg(jsonb_build_object('n', i, 'sleep', 0.5)) FROM generate_series(1, 5) AS i));
});
my $w = worker('stopper', '--batch', $has_release ? '5' : '1');
ok(wait_output($w, qr/claimed task/), 'the worker claimed and started a task');
$w->{h}->signal('TERM');
is(finish($w), 0, 'SIGTERM: the worker exited 0');
like($w->{out}, qr/completed task \d+\nstopper: stopped\n\z/, 'SIGTERM: it finished the task in hand and stopped');
is($node->safe_psql('postgres', q{
  SELECT (SELECT count(*) FROM worker_results) || ' '
         || (SELECT count(*) FROM concurrency."q_emails" WHERE state = 'ready' AND attempt = 0) || ' '
         || (SELECT count(*) FROM concurrency."q_emails" WHERE state = 'leased')}),
	'1 4 0', 'SIGTERM: one task done, four ready with no attempt spent, none leased');
$node->safe_psql('postgres', q{DELETE FROM concurrency."q_emails"; TRUNCATE worker_results});

# --- a frozen worker is fenced off --------------------------------------------
# (a lease that expires takes an attempt: give the task a second one)
$node->safe_psql('postgres', q{SELECT concurrency.alter_queue('emails', max_attempts => 2)});
my $task = $node->safe_psql('postgres', q{SELECT concurrency.enqueue('emails', '{"sleep": 2}')});
my $stale = worker('stale');
ok(wait_output($stale, qr/claimed task $task \(attempt 1\)/), 'the first worker claimed the task');
$stale->{h}->signal('STOP');    # frozen mid-task: no heartbeats either
# the lease as its heartbeats last extended it (queue_stats counts a lease
# as expired by its first deadline, before a claim looks at the extension)
$node->poll_query_until('postgres',
	qq{SELECT greatest(lease_expires_at, lease_extended_to) < clock_timestamp() FROM concurrency."q_emails" WHERE id = $task})
  or die 'the lease did not expire';
my $rescuer = worker('rescuer', '--drain');
is(finish($rescuer), 0, 'a second worker took the task over and drained the queue');
like($rescuer->{out}, qr/claimed task $task \(attempt 2\)\nrescuer: completed task $task\n/,
	'it claimed the task with attempt 2 and completed it');
$stale->{h}->signal('CONT');
ok(wait_output($stale, qr/fenced off task $task: lease on task $task of queue "emails" was lost|fenced off task $task: task $task of queue "emails" does not exist/),
	'the frozen worker, woken up, was fenced off');
$stale->{h}->signal('TERM');
is(finish($stale), 0, 'and then stopped cleanly');
is($node->safe_psql('postgres', qq{SELECT string_agg(worker, ',') FROM worker_results WHERE task_id = $task}),
	'rescuer', "the task's effect exists once, from the worker that held the lease");

$node->stop;
done_testing();
