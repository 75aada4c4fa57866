# Queue counts kept over time (queue_stats_history): where the module is
# preloaded, the schedule runner samples each database's queue counts every
# concurrency.stats_history_interval and deletes the samples older than
# concurrency.stats_history_retention; a database whose first queue is
# created after the server started gets its samples too; interval 0 (per
# database) turns it off there.
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

$node->stop;
done_testing();
