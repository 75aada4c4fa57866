# Keyed concurrency under load and faults: 8 workers on two queues, 200 keys
# (100 serial keys, key_limit 1, max_leased 5; 100 keys with key_limit 2,
# max_leased 6), random task durations and priorities, some failures with
# retries, and workers whose backends are terminated mid-task (their leases
# expire and are reclaimed). Each worker records a task's start and end in the
# work's own transaction, the one that completes the task; a failed or killed
# attempt leaves no record. Afterwards:
#   * no key ever had more recorded runs at once than its key_limit, and no
#     queue more than its max_leased;
#   * a monitor that sampled the leases during the run never saw a limit
#     exceeded;
#   * the runs of every serial key started in enqueue order, whatever their
#     priority;
#   * every task ran (completed) exactly once, and no task is left.
use strict;
use warnings;
use IPC::Run;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $per_key = 8;
my $workers = 8;

my $node = PostgreSQL::Test::Cluster->new('queue_keys');
$node->init;
$node->start;

$node->safe_psql('postgres', qq{
  CREATE EXTENSION concurrency_ext;
  SELECT concurrency.create_queue('serial', lease => '2 seconds', max_attempts => 1000,
                                  key_limit => 1, max_leased => 5);
  SELECT concurrency.create_queue('pairs', lease => '2 seconds', max_attempts => 1000,
                                  key_limit => 2, max_leased => 6);
  CREATE TABLE limits (queue text PRIMARY KEY, key_limit int, max_leased int);
  INSERT INTO limits VALUES ('serial', 1, 5), ('pairs', 2, 6);
  CREATE TABLE runs (queue text, task_id bigint, key text, n int, attempt int, worker text,
                     started timestamptz, ended timestamptz);
  CREATE TABLE violations (seen_at timestamptz DEFAULT clock_timestamp(), what text);
  CREATE TABLE samples (n bigint);
  INSERT INTO samples VALUES (0);
  -- tasks of all keys interleaved, with random priorities: a serial key's
  -- order is its enqueue order all the same (n counts a key's tasks)
  SELECT count(concurrency.enqueue(q, jsonb_build_object('key', q || k, 'n', n),
                                   priority => (random() * 10)::int, concurrency_key => q || k))
    FROM (SELECT n, k, q FROM generate_series(1, $per_key) AS n, generate_series(1, 100) AS k,
                              unnest(ARRAY['serial', 'pairs']) AS q ORDER BY n, k, q) AS s;
});
my $tasks = 200 * $per_key;

$node->safe_psql('postgres', q{
  CREATE PROCEDURE work(w text) LANGUAGE plpgsql AS $$
  DECLARE
    t record;
    q text;
    idle int := 0;
  BEGIN
    LOOP
      q := CASE WHEN random() < 0.5 THEN 'serial' ELSE 'pairs' END;
      SELECT * INTO t FROM concurrency.dequeue(q, worker => w);
      COMMIT;                                   -- the claim is on record
      IF t.task_id IS NULL THEN
        EXIT WHEN NOT EXISTS (SELECT FROM concurrency."q_serial")
              AND NOT EXISTS (SELECT FROM concurrency."q_pairs");
        PERFORM pg_sleep(0.005);
        COMMIT;
        CONTINUE;
      END IF;
      PERFORM set_config('application_name', w || ':busy', false);
      INSERT INTO runs VALUES (q, t.task_id, t.payload ->> 'key', (t.payload ->> 'n')::int, t.attempt, w,
                               clock_timestamp(), NULL);
      PERFORM pg_sleep(0.01 + random() * 0.03); -- the work takes a while: faults land here
      IF random() < 0.1 THEN
        ROLLBACK;                               -- the work failed: no record of it
        PERFORM concurrency.fail(q, t.task_id, t.lease_token, 'random failure', retry_in => '10 ms');
        COMMIT;
      ELSE
        UPDATE runs SET ended = clock_timestamp() WHERE task_id = t.task_id AND queue = q AND ended IS NULL;
        PERFORM concurrency.complete(q, t.task_id, t.lease_token);
        COMMIT;                                 -- the record and the completion, together
      END IF;
      PERFORM set_config('application_name', w, false);
    END LOOP;
  END $$;
  -- samples the leases of both queues until they are empty
  CREATE PROCEDURE monitor() LANGUAGE plpgsql AS $$
  BEGIN
    LOOP
      INSERT INTO violations (what)
        SELECT format('key %s of %s: %s leased', key, queue, n)
          FROM (SELECT 'serial' AS queue, concurrency_key AS key, count(*) AS n
                  FROM concurrency."q_serial" WHERE state = 'leased' GROUP BY concurrency_key
                UNION ALL
                SELECT 'pairs', concurrency_key, count(*)
                  FROM concurrency."q_pairs" WHERE state = 'leased' GROUP BY concurrency_key) AS s
          JOIN limits USING (queue)
         WHERE n > key_limit
        UNION ALL
        SELECT format('queue %s: %s leased', queue, n)
          FROM (SELECT 'serial' AS queue, count(*) AS n FROM concurrency."q_serial" WHERE state = 'leased'
                UNION ALL
                SELECT 'pairs', count(*) FROM concurrency."q_pairs" WHERE state = 'leased') AS s
          JOIN limits USING (queue)
         WHERE n > max_leased;
      UPDATE samples SET n = n + 1;
      COMMIT;
      EXIT WHEN NOT EXISTS (SELECT FROM concurrency."q_serial") AND NOT EXISTS (SELECT FROM concurrency."q_pairs");
      PERFORM pg_sleep(0.005);
    END LOOP;
  END $$;
});

my %running;    # name -> IPC::Run harness
sub start_session
{
	my ($name, $call) = @_;
	my ($out, $err) = ('', '');
	$running{$name} = IPC::Run::start(
		[
			'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d',
			$node->connstr('postgres') . " application_name=$name",
			'-c', $call
		],
		'<', \undef, '>', \$out, '2>', \$err);
}

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
	my $count;
	my $ret = $node->psql('postgres',
		'SELECT (SELECT count(*) FROM concurrency."q_serial") + (SELECT count(*) FROM concurrency."q_pairs")',
		stdout => \$count);
	return $ret == 0 ? $count : undef;
}

start_session('monitor', 'CALL monitor()');
start_session("w$_", "CALL work('w$_')") for 1 .. $workers;

my $kills = 0;
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
while (time() < $deadline)
{
	usleep(100_000);
	my $left = remaining();
	next unless defined $left;
	if ($kills < 4 && $left > 20)
	{
		my $pid = '';
		$node->psql('postgres',
			q{SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'w%:busy' ORDER BY random() LIMIT 1},
			stdout => \$pid);
		if ($pid ne '')
		{
			$node->psql('postgres', "SELECT pg_terminate_backend($pid)");
			$kills++;
		}
	}
	reap();
	last if $left == 0 && reap() == 0;
	for my $name (map { "w$_" } 1 .. $workers)
	{
		start_session($name, "CALL work('$name')") unless $running{$name} || $left == 0;
	}
}

is(remaining(), 0, 'both queues are empty: no task lost or stuck');
ok($kills >= 2, "worker backends were terminated mid-task ($kills)");
is($node->safe_psql('postgres', 'SELECT count(*) FROM runs WHERE attempt > 1') > 0,
	1, 'failed and killed attempts were retried');

is($node->safe_psql('postgres', q{
  SELECT count(*), count(DISTINCT (queue, task_id)) FROM runs}),
	"$tasks|$tasks", 'every task ran (completed) exactly once');

# at the start of each run, the runs of its key (and of its queue) in progress
is($node->safe_psql('postgres', q{
  SELECT count(*) FROM runs r JOIN limits l USING (queue)
   WHERE (SELECT count(*) FROM runs s
           WHERE s.queue = r.queue AND s.key = r.key AND s.started <= r.started AND s.ended > r.started)
         > l.key_limit}),
	'0', 'no key ever had more runs at once than its key_limit');
is($node->safe_psql('postgres', q{
  SELECT count(*) FROM runs r JOIN limits l USING (queue)
   WHERE (SELECT count(*) FROM runs s
           WHERE s.queue = r.queue AND s.started <= r.started AND s.ended > r.started)
         > l.max_leased}),
	'0', 'no queue ever had more runs at once than its max_leased');
is($node->safe_psql('postgres', q{
  SELECT count(*) FROM runs r JOIN limits l USING (queue)
   WHERE (SELECT count(*) FROM runs s
           WHERE s.queue = r.queue AND s.key = r.key AND s.started <= r.started AND s.ended > r.started)
         = l.key_limit AND l.key_limit = 2}) > 0,
	1, 'keys with key_limit 2 did run two tasks at once');
is($node->safe_psql('postgres', 'SELECT count(*) FROM violations'), '0',
	'the monitor never saw a limit exceeded');
ok($node->safe_psql('postgres', 'SELECT n FROM samples') > 10, 'the monitor sampled the leases during the run');

is($node->safe_psql('postgres', q{
  SELECT count(*) FROM (
    SELECT n, lag(n) OVER (PARTITION BY key ORDER BY started) AS previous
      FROM runs WHERE queue = 'serial') AS s
   WHERE n < previous}),
	'0', 'the tasks of every serial key ran in enqueue order');

$_->kill_kill for values %running;
$node->stop;
done_testing();
