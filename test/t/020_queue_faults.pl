# Task queue under faults: several workers share a queue while their backends
# are terminated mid-task, one is SIGKILLed (the server resets every backend),
# and the server is restarted with an immediate shutdown. Afterwards every
# task's database effect exists exactly once, and no task is lost, stuck or
# dead.
#
# A worker is a procedure run by psql: it claims a task and commits (the lease
# is then on record), does the task's work -- one row in `effects` -- and
# completes the task in the same transaction as that row. A worker whose
# backend dies is simply started again, as a supervisor would.
use strict;
use warnings;
use IPC::Run;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $tasks   = 2000;
my $workers = 4;

my $node = PostgreSQL::Test::Cluster->new('queue_faults');
$node->init;
$node->append_conf('postgresql.conf', "restart_after_crash = on\n");
$node->start;

$node->safe_psql('postgres', qq{
  CREATE EXTENSION concurrency_ext;
  SELECT concurrency.create_queue('faults', lease => '1 second', max_attempts => 1000);
  CREATE TABLE effects (task_id bigint NOT NULL, n integer NOT NULL, attempt integer NOT NULL, worker text);
  SELECT count(*) FROM concurrency.enqueue_batch('faults',
    (SELECT array_agg(jsonb_build_object('n', i)) FROM generate_series(1, $tasks) AS i));
});
$node->safe_psql('postgres', q{
  CREATE PROCEDURE work(w text) LANGUAGE plpgsql AS $$
  DECLARE
    t record;
  BEGIN
    LOOP
      SELECT * INTO t FROM concurrency.dequeue('faults', worker => w);
      COMMIT;                                   -- the claim is on record
      IF t.task_id IS NULL THEN
        EXIT WHEN NOT EXISTS (SELECT FROM concurrency."q_faults");
        PERFORM pg_sleep(0.05);                 -- others hold the rest, or their leases must expire
        COMMIT;
        CONTINUE;
      END IF;
      PERFORM set_config('application_name', w || ':busy', false);
      INSERT INTO effects VALUES (t.task_id, (t.payload ->> 'n')::int, t.attempt, w);
      PERFORM pg_sleep(0.02 + random() * 0.03); -- the work takes a while: faults land here
      PERFORM concurrency.complete('faults', t.task_id, t.lease_token);
      COMMIT;                                   -- the effect and the completion, together
      PERFORM set_config('application_name', w, false);
    END LOOP;
  END $$;
});

my %running;    # worker name -> IPC::Run harness
my $started = 0;

sub start_worker
{
	my ($name) = @_;
	my ($out, $err) = ('', '');
	$running{$name} = IPC::Run::start(
		[
			'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d',
			$node->connstr('postgres') . " application_name=$name",
			'-c', "CALL work('$name')"
		],
		'<', \undef, '>', \$out, '2>', \$err);
	$started++;
}

# Reaps workers that have ended; returns how many are still running.
sub reap
{
	for my $name (keys %running)
	{
		my $h = $running{$name};
		eval { $h->pump_nb };
		next if $h->pumpable;
		$h->finish;
		delete $running{$name};
	}
	return scalar keys %running;
}

sub remaining
{
	my ($ok, $count) = (0, undef);
	my $ret = $node->psql('postgres', 'SELECT count(*) FROM concurrency."q_faults"', stdout => \$count);
	return $ret == 0 ? $count : undef;
}

sub busy_backend
{
	my $pid = '';
	$node->psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'w%:busy' ORDER BY random() LIMIT 1},
		stdout => \$pid);
	return $pid;
}

start_worker("w$_") for 1 .. $workers;

# The faults, in order, a quarter of a second apart, while enough tasks remain.
my @faults = (
	('terminate') x 2,
	'immediate restart',
	('terminate') x 2,
	'sigkill',
	('terminate') x 2);
my %done;
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
while (time() < $deadline)
{
	usleep(250_000);
	my $left = remaining();
	if (@faults && defined $left && $left > 50)
	{
		my $fault = $faults[0];
		if ($fault eq 'immediate restart')
		{
			$node->stop('immediate');
			$node->start;
			shift @faults;
			$done{$fault}++;
		}
		else
		{
			my $pid = busy_backend();
			if ($pid ne '')
			{
				if ($fault eq 'terminate')
				{
					$node->psql('postgres', "SELECT pg_terminate_backend($pid)");
				}
				else
				{
					kill 'KILL', $pid;
					# wait until the postmaster has reset every backend and accepts connections
					$node->poll_query_until('postgres', 'SELECT 1', '1');
				}
				shift @faults;
				$done{$fault}++;
			}
		}
	}
	# workers that died are started again (a worker that found the queue
	# empty also ends; then nothing is left to restart it for)
	reap();
	$left = remaining();
	next unless defined $left;
	last if $left == 0 && reap() == 0;
	for my $name (map { "w$_" } 1 .. $workers)
	{
		start_worker($name) unless $running{$name} || $left == 0;
	}
}

is(remaining(), 0, 'the queue is empty: no task lost or stuck');
is($done{terminate}, 6, 'backends were terminated mid-task');
is($done{sigkill}, 1, 'a backend was SIGKILLed mid-task (the server reset every backend)');
is($done{'immediate restart'}, 1, 'the server was restarted with an immediate shutdown');

my $effects = $node->safe_psql('postgres', q{
  SELECT count(*), count(DISTINCT task_id), count(DISTINCT n), min(n), max(n) FROM effects});
is($effects, "$tasks|$tasks|$tasks|1|$tasks", 'every task has its effect exactly once');
my $redelivered = $node->safe_psql('postgres', 'SELECT count(*) FROM effects WHERE attempt > 1');
ok($redelivered > 0, "tasks of killed workers were re-delivered after their lease ($redelivered)");
is($node->safe_psql('postgres', q{SELECT count(*) FROM concurrency."q_faults" WHERE state = 'dead'}),
	'0', 'no task is dead');
note("worker processes started: $started");

$_->kill_kill for values %running;
$node->stop;
done_testing();
