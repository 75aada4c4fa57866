# Schedules with no scheduler process: 8 workers waiting in dequeue(…, wait)
# (the poll interval is an hour: they wake at the schedule's due times) work
# a 1-second schedule for about 20 seconds, with a fast restart of the server
# in the middle (waiting and materializing transactions killed) and a few
# seconds of downtime. Then: no due time became two tasks, none was claimed
# twice, and every due time in the run was either enqueued or counted as
# skipped, the skipped ones only where the catch-up rule allows (a run of
# missed due times is followed by the catch_up latest ones). And the
# schedule survives pg_dump / pg_restore with its due times so far. With no
# dequeue at all, the schedule runner enqueues the due times: once each, on
# time, after a restart too, not in a database that turned it off, and a
# database it serves can be dropped.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(sleep);
use FindBin;
use lib "$FindBin::RealBin/lib";
use DumpRestore;

my $catch_up = 3;
my $node = PostgreSQL::Test::Cluster->new('schedule');
$node->init;
$node->append_conf(
	'postgresql.conf', q(
shared_preload_libraries = 'concurrency_ext'
concurrency.wait_poll_interval = '1h'
autovacuum = off
));
$node->start;
$node->safe_psql('postgres', qq(
CREATE EXTENSION concurrency_ext;
SELECT concurrency.create_queue('ts', lease => '1 hour', retain => '1 day');
SELECT concurrency.schedule('each_second', 'ts', every => '1 second', payload => '{"job": "tick"}',
                            catch_up => $catch_up);
));

# A worker: claims, and completes in the same statement with the time it
# claimed the task as the result.
my $script = PostgreSQL::Test::Utils::tempdir() . '/worker.sql';
PostgreSQL::Test::Utils::append_to_file($script, q{
SELECT d.task_id, concurrency.complete('ts', d.task_id, d.lease_token, jsonb_build_object('claimed_at', clock_timestamp()))
  FROM concurrency.dequeue('ts', wait => '3 seconds') d;
});

sub start_workers {
	my ($seconds) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'pgbench', '-n', '-c', '8', '-T', $seconds, '-f', $script, '-h', $node->host, '-p', $node->port,
			'postgres' ],
		'>', \$out, '2>', \$err);
	return { handle => $h, out => \$out, err => \$err };
}

my $done_sql = q(SELECT count(*) FROM concurrency."q_ts" WHERE state = 'done');

# first half: the workers run until the server stops under them
my $first = start_workers(60);
$node->poll_query_until('postgres', "SELECT ($done_sql) >= 8") or die 'the workers claim no scheduled task';
pass('waiting workers claim the scheduled tasks');
$node->stop('fast');
eval { $first->{handle}->finish };
# downtime longer than catch_up due times: some are skipped
sleep($catch_up + 2);
$node->start;

# second half
my $before = $node->safe_psql('postgres', $done_sql);
my $second = start_workers(10);
$second->{handle}->finish;
like(${ $second->{out} }, qr/number of failed transactions: 0|transactions actually processed/,
	'the workers ran after the restart');
cmp_ok($node->safe_psql('postgres', $done_sql), '>', $before + 5, 'tasks were claimed after the restart');

my ($tasks, $distinct) = split /\|/, $node->safe_psql('postgres',
	q(SELECT count(*), count(DISTINCT payload->>'scheduled_for') FROM concurrency."q_ts"));
is($tasks, $distinct, "no due time became two tasks ($tasks tasks)");
is($node->safe_psql('postgres', q(SELECT count(*) FROM concurrency."q_ts" WHERE attempt > 1)),
	'0', 'no task was claimed twice');
is($node->safe_psql('postgres', q(SELECT count(*) FROM concurrency."q_ts" WHERE payload->>'job' IS DISTINCT FROM 'tick')),
	'0', "every task has the schedule's payload");

# every due time between the first and the latest enqueued: a task, or
# skipped (tasks, span and skipped read by one statement: the schedule
# runner goes on enqueuing a due time each second now that no worker runs)
my ($span_tasks, $span, $skipped) = split /\|/, $node->safe_psql('postgres', q(
SELECT count(*), extract(epoch FROM max(due) - min(due))::int + 1, (SELECT skipped FROM concurrency.schedules)
  FROM (SELECT (payload->>'scheduled_for')::timestamptz AS due FROM concurrency."q_ts") t));
is($span_tasks + $skipped, $span, "each of the $span due times was enqueued or counted as skipped ($skipped skipped)");
cmp_ok($skipped, '>', 0, 'the downtime skipped due times beyond catch_up');
# a run of missed due times is followed by the catch_up latest ones
is($node->safe_psql('postgres', qq(
WITH due AS (SELECT (payload->>'scheduled_for')::timestamptz AS at FROM concurrency."q_ts"),
     span AS (SELECT s AS at FROM due, LATERAL (SELECT min(at) AS lo, max(at) AS hi FROM due) b,
              generate_series(b.lo, b.hi, interval '1 second') s GROUP BY s),
     missed AS (SELECT at FROM span EXCEPT SELECT at FROM due)
SELECT count(*) FROM missed m
 WHERE NOT EXISTS (SELECT FROM missed n WHERE n.at = m.at + interval '1 second')
   AND (SELECT count(*) FROM due d WHERE d.at > m.at AND d.at <= m.at + interval '$catch_up seconds') < $catch_up)),
	'0', 'each run of skipped due times is followed by the catch_up latest ones');

# waiters wake at the due time: most tasks are claimed within a second of it
my $late = $node->safe_psql('postgres', q(
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM (result->>'claimed_at')::timestamptz
                                                             - (payload->>'scheduled_for')::timestamptz))
  FROM concurrency."q_ts" WHERE state = 'done'));
cmp_ok($late, '<', 1, "the median task is claimed ${late}s after its due time");

# With no dequeue at all, the schedule runner (a background worker that the
# module's background process starts at each due time) enqueues the due times:
# each once, on time, and again after a restart (the runner of every
# database at server start catches up).
my $idle_sql = q(SELECT count(*), count(DISTINCT payload->>'scheduled_for'),
                        coalesce(max(extract(epoch FROM enqueued_at - (payload->>'scheduled_for')::timestamptz)), 0)
                   FROM concurrency."q_idle");
$node->safe_psql('postgres', q(
SELECT concurrency.create_queue('idle', retain => '1 day');
SELECT concurrency.schedule('idle_tick', 'idle', every => '1 second');
));
$node->poll_query_until('postgres', q(SELECT count(*) >= 3 FROM concurrency."q_idle"))
  or die 'no runner enqueued the due times';
my ($idle, $idle_distinct, $idle_late) = split /\|/, $node->safe_psql('postgres', $idle_sql);
is($idle, $idle_distinct, "with no dequeue, the runner enqueued $idle due times, each once");
cmp_ok($idle_late, '<', 1, "each within a second of its due time (latest: ${idle_late}s)");
is($node->safe_psql('postgres', q(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'concurrency_ext background')),
	'1', 'the background process (one) launches the runners');
# concurrency.schedule_runner off for the database: its runners leave it alone
$node->safe_psql('postgres', q(ALTER DATABASE postgres SET concurrency.schedule_runner = off));
$node->safe_psql('postgres', q(SELECT concurrency.schedule('idle_tick', 'idle', every => '1 second', priority => 1)));
my $off_since = $node->safe_psql('postgres', q(SELECT clock_timestamp()));
$node->poll_query_until('postgres', qq(SELECT clock_timestamp() > '$off_since'::timestamptz + interval '2.5 seconds'))
  or die 'the clock stands still';
is($node->safe_psql('postgres', qq(SELECT count(*) FROM concurrency."q_idle" WHERE enqueued_at > '$off_since')),
	'0', 'with concurrency.schedule_runner off, nothing is enqueued without a dequeue');
$node->safe_psql('postgres', q(ALTER DATABASE postgres RESET concurrency.schedule_runner));
# a schedule written again wakes the runner at its commit
$node->safe_psql('postgres', q(SELECT concurrency.schedule('idle_tick', 'idle', every => '1 second')));
$node->poll_query_until('postgres', qq(SELECT count(*) >= 2 FROM concurrency."q_idle" WHERE enqueued_at > '$off_since'))
  or die 'the runner did not come back';
pass('with the setting reset, the runner enqueues again');
# a paused queue: the runner leaves its schedule alone; the resume catches up
# by catch_up (1: the latest missed due time), the others counted as skipped
$node->safe_psql('postgres', q(SELECT concurrency.pause_queue('idle')));
my $paused_since = $node->safe_psql('postgres', q(SELECT clock_timestamp()));
my $skipped_before = $node->safe_psql('postgres', q(SELECT skipped FROM concurrency.schedules WHERE name = 'idle_tick'));
$node->poll_query_until('postgres', qq(SELECT clock_timestamp() > '$paused_since'::timestamptz + interval '3.5 seconds'))
  or die 'the clock stands still';
is($node->safe_psql('postgres', qq(SELECT count(*) FROM concurrency."q_idle" WHERE enqueued_at > '$paused_since')),
	'0', 'nothing is enqueued for a paused queue');
# The latest missed due time is the last one before the catch-up ran, which
# a loaded machine may delay past another due time: so the check is that no
# earlier missed due time was enqueued, not a count before $resumed_at.
my $resumed_at = $node->safe_psql('postgres', q(SELECT clock_timestamp()));
$node->safe_psql('postgres', q(SELECT concurrency.resume_queue('idle')));
$node->poll_query_until('postgres', qq(SELECT count(*) >= 1 FROM concurrency."q_idle" WHERE enqueued_at > '$paused_since'))
  or die 'the resume did not catch up';
is($node->safe_psql('postgres', qq(SELECT count(*) FROM concurrency."q_idle" WHERE enqueued_at > '$paused_since'
                                      AND (payload->>'scheduled_for')::timestamptz < '$resumed_at'::timestamptz - interval '1 second')),
	'0', 'the resume enqueues the latest missed due time only (catch_up 1), none of the earlier ones');
cmp_ok($node->safe_psql('postgres', q(SELECT skipped FROM concurrency.schedules WHERE name = 'idle_tick')) - $skipped_before,
	'>=', 2, 'the other missed due times are counted as skipped');
# a database with a schedule can be dropped (its runners do not stay connected)
$node->safe_psql('postgres', q(CREATE DATABASE runner_drop));
$node->safe_psql('runner_drop', q(
CREATE EXTENSION concurrency_ext;
SELECT concurrency.create_queue('d');
SELECT concurrency.schedule('d_tick', 'd', every => '1 second');
));
$node->poll_query_until('runner_drop', q(SELECT count(*) >= 2 FROM concurrency."q_d"))
  or die 'no runner in the second database';
$node->safe_psql('postgres', q(DROP DATABASE runner_drop));
pass('a database whose schedules a runner serves is dropped');
# a restart: the runner catches up at server start, with no dequeue
$node->stop('fast');
my $stopped_at = time();
sleep(2);
$node->start;
$node->poll_query_until('postgres', qq(SELECT count(*) >= 1 FROM concurrency."q_idle"
                                        WHERE (payload->>'scheduled_for')::timestamptz > to_timestamp($stopped_at + 1)))
  or die 'no runner after the restart';
($idle, $idle_distinct) = split /\|/, $node->safe_psql('postgres', $idle_sql);
is($idle, $idle_distinct, "after a restart the runner goes on, each due time once ($idle)");
$node->safe_psql('postgres', q(SELECT concurrency.unschedule('idle_tick')));

# pg_dump / pg_restore: the schedule comes back with what it enqueued so far
# (no due time enqueued again), and its queue's dequeue goes on from there
$node->safe_psql('postgres', q(SELECT concurrency.schedule('nightly', 'ts', cron => '30 2 * * *',
                                                          time_zone => 'Europe/Berlin', catch_up => 2)));
my $schedules_sql = q(SELECT string_agg(format('%s|%s|%s|%s|%s|%s', name, spec, time_zone, next_run_at, last_task_id,
                                               skipped), E'\n' ORDER BY name) FROM concurrency.schedules);
# no worker now: the every-second schedule stays as it is while this runs
$node->safe_psql('postgres', q(UPDATE concurrency.schedule SET next_run_at = next_run_at + interval '1 hour'));
my $schedules = $node->safe_psql('postgres', $schedules_sql);
my $last_due = $node->safe_psql('postgres', q(SELECT string_agg(last_due::text, ',' ORDER BY name) FROM concurrency.schedule));
for my $format ('custom', 'plain') {
	dump_and_restore($node, $node, $format, "restored_$format");
	is($node->safe_psql("restored_$format", $schedules_sql), $schedules, "$format: the schedules come back");
	is($node->safe_psql("restored_$format", q(SELECT string_agg(last_due::text, ',' ORDER BY name) FROM concurrency.schedule)),
		$last_due, "$format: with their last due times");
	# the next due time is that after the last one enqueued, once it has come
	$node->poll_query_until("restored_$format", q(SELECT clock_timestamp() > last_due + interval '1 second'
	                                                FROM concurrency.schedule WHERE name = 'each_second'))
	  or die 'the clock stands still';
	# custom: the runner enqueues them; plain: with the runner off there,
	# the queue's dequeue does
	my $sf = q((payload->>'scheduled_for')::timestamptz);
	my $dumped = $node->safe_psql("restored_$format", qq(SELECT max($sf) FROM concurrency."q_ts"));
	$node->safe_psql('postgres', qq(ALTER DATABASE "restored_$format" SET concurrency.schedule_runner = off))
	  if $format eq 'plain';
	$node->safe_psql("restored_$format", q(UPDATE concurrency.schedule SET next_run_at = last_due + interval '1 second'
	                                        WHERE name = 'each_second'));
	if ($format eq 'custom') {
		$node->poll_query_until("restored_$format",
			qq(SELECT count(*) >= 1 FROM concurrency."q_ts" WHERE $sf > '$dumped'))
		  or die 'no runner in the restored database';
	} else {
		$node->safe_psql("restored_$format", q(SELECT count(*) FROM concurrency.dequeue('ts', batch => 1000)));
	}
	my ($fresh, $all, $distinct) = split /\|/, $node->safe_psql("restored_$format",
		qq(SELECT count(*) FILTER (WHERE $sf > '$dumped'), count(*), count(DISTINCT $sf) FROM concurrency."q_ts"));
	ok($fresh >= 1 && $all == $distinct,
		($format eq 'custom' ? 'custom: the runner' : 'plain: dequeue')
		  . " enqueues the due times after the dumped ones ($fresh), none twice");
}

$node->stop;
done_testing();
