# Queue counts kept over time (queue_stats_history): where the module is
# preloaded, the schedule runner samples each database's queue counts every
# concurrency.stats_history_interval and deletes the samples older than
# concurrency.stats_history_retention; a database whose first queue is
# created after the server started gets its samples too; interval 0 (per
# database) turns it off there; creating a queue where the database's runner
# is due already starts no runner.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('stats_history');
$node->init;
$node->append_conf(
	'postgresql.conf', q(
shared_preload_libraries = 'concurrency_ext'
concurrency.stats_history_interval = '1s'
concurrency.stats_history_retention = '1min'
autovacuum = off
));
$node->start;
$node->safe_psql('postgres', q(
CREATE EXTENSION concurrency_ext;
SELECT concurrency.create_queue('jobs');
SELECT concurrency.enqueue('jobs', '{}') FROM generate_series(1, 3);
));

# samples, one a second, with the counts of queue_stats
$node->poll_query_until('postgres',
	q(SELECT count(DISTINCT sampled_at) >= 3 FROM concurrency.queue_stats_history WHERE queue = 'jobs'))
  or die 'no samples of queue jobs';
is($node->safe_psql('postgres',
	q(SELECT ready || '/' || inserted FROM concurrency.queue_stats_history WHERE queue = 'jobs' ORDER BY sampled_at DESC LIMIT 1)),
	'3/3', 'the last sample has the ready tasks and the rows inserted');

# retention: a sample older than a minute is deleted by the next sample
$node->safe_psql('postgres', q(
INSERT INTO concurrency.queue_stats_sample (sampled_at, queue, ready)
VALUES (now() - interval '2 minutes', 'jobs', 99);
));
$node->poll_query_until('postgres', q(SELECT NOT EXISTS (SELECT FROM concurrency.queue_stats_sample WHERE ready = 99)))
  or die 'the old sample stayed';
pass('a sample older than the retention is deleted');

# a database whose extension and first queue come after the server started
$node->safe_psql('postgres', 'CREATE DATABASE later');
$node->safe_psql('later', q(
CREATE EXTENSION concurrency_ext;
SELECT concurrency.create_queue('late');
));
$node->poll_query_until('later', q(SELECT count(*) >= 2 FROM concurrency.queue_stats_history WHERE queue = 'late'))
  or die 'no samples in a database created later';
pass('a database created after the start is sampled once it has a queue');

# interval 0 for one database: no more samples there (a runner started
# before the change may take one more: wait for three samples of the other
# database before counting)
$node->safe_psql('postgres', q(ALTER DATABASE later SET concurrency.stats_history_interval = 0));
my $wait_samples = sub {
	my $mark = $node->safe_psql('postgres', q(SELECT count(DISTINCT sampled_at) FROM concurrency.queue_stats_sample));
	$node->poll_query_until('postgres',
		qq(SELECT count(DISTINCT sampled_at) >= $mark + 3 FROM concurrency.queue_stats_sample))
	  or die 'sampling stopped in database postgres';
};
$wait_samples->();
my $before = $node->safe_psql('later', q(SELECT count(*) FROM concurrency.queue_stats_sample));
$wait_samples->();
is($node->safe_psql('later', q(SELECT count(*) FROM concurrency.queue_stats_sample)), $before,
	'no sample where the interval is 0, while the other database goes on');

# create_queue where the database's runner is due already starts none: a
# runner reads concurrency.schedule (its scans counted in pg_stat_all_tables
# when it exits), and a database sampled once an hour has its next look an
# hour away. A resume_queue, which asks for a look, starts one: the count
# moves when a runner runs.
$node->safe_psql('postgres', 'CREATE DATABASE quiet');
$node->safe_psql('postgres', q(ALTER DATABASE quiet SET concurrency.stats_history_interval = '1h'));
$node->safe_psql('quiet', q(
CREATE EXTENSION concurrency_ext;
SELECT concurrency.create_queue('first');
));
my $runner_scans = sub {
	return $node->safe_psql('quiet', q(
SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_all_tables
 WHERE relid = 'concurrency.schedule'::regclass));
};
$node->poll_query_until('quiet', q(
SELECT (SELECT count(*) = 1 FROM concurrency.queue_stats_sample WHERE queue = 'first')
   AND (SELECT seq_scan + coalesce(idx_scan, 0) > 0 FROM pg_stat_all_tables
         WHERE relid = 'concurrency.schedule'::regclass)))
  or die 'the first queue of database quiet was not sampled';
# the runner that sampled has exited (its scans counted at its exit)
sleep(1);
my $scans = $runner_scans->();
$node->safe_psql('quiet', qq(SELECT concurrency.create_queue('more_$_'))) for 1 .. 5;
sleep(3);
is($runner_scans->(), $scans, 'create_queue starts no runner where one is due already');
$node->safe_psql('quiet', q(SELECT concurrency.pause_queue('first')));
$node->safe_psql('quiet', q(SELECT concurrency.resume_queue('first')));
$node->poll_query_until('quiet', qq(
SELECT seq_scan + coalesce(idx_scan, 0) > $scans FROM pg_stat_all_tables
 WHERE relid = 'concurrency.schedule'::regclass))
  or die 'no runner after a resume_queue';
pass('a resume_queue starts the runner');
is($node->safe_psql('quiet', q(SELECT count(*) FROM concurrency.queue_stats_sample)), '1',
	'one sample in an hour however often the runner starts');

$node->stop;
done_testing();
