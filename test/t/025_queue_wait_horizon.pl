# A waiting dequeue that is its statement's only work (SELECT … FROM
# concurrency.dequeue(…, wait) in a transaction of its own, its output
# columns the function's own or built-in immutable expressions of them) holds
# no xmin horizon back while it sleeps: vacuum removes rows that died after it
# began, and a commit still wakes it to claim with a fresh snapshot. Where its
# statement's snapshot may still be read (a transaction block, an aggregate
# or a user function over its rows), it keeps holding it.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('horizon');
$node->init;
$node->append_conf(
	'postgresql.conf', q(
shared_preload_libraries = 'concurrency_ext'
autovacuum = off
));
$node->start;
$node->safe_psql('postgres', q(
CREATE EXTENSION concurrency_ext;
SELECT concurrency.create_queue('th');
CREATE TABLE hot (id integer PRIMARY KEY, n integer);
INSERT INTO hot VALUES (1, 0);
CREATE FUNCTION reads_hot(bigint) RETURNS bigint STABLE LANGUAGE sql AS 'SELECT n::bigint FROM hot WHERE id = 1';
));

# A session whose statement `sql` is seen sleeping in dequeue.
sub start_waiter {
	my ($name, @sql) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe("SET application_name = '$name'");
	$s->{stdin} .= "$_\n" for @sql;
	$s->{run}->pump_nb;
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = '$name' AND wait_event_type = 'Extension'"
	) or die "$name does not wait";
	return $s;
}

sub holds_xmin {
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT backend_xmin IS NOT NULL FROM pg_stat_activity WHERE application_name = '$name'") eq 't';
}

# 20 rows die now (an update each, committed); how many of them vacuum must keep
sub dead_kept {
	$node->safe_psql('postgres', 'UPDATE hot SET n = n + 1') for 1 .. 20;
	my ($ret, $out, $err) = $node->psql('postgres', 'VACUUM (VERBOSE) hot');
	$err =~ /(\d+) are dead but not yet removable/ or die "VACUUM VERBOSE said: $err";
	return $1;
}

# released: the plain claim, and the runtimes' claim (casts, the lease's time left)
for my $case (
	[ 'plain', q{SELECT task_id FROM concurrency.dequeue('th', wait => '1 hour');} ],
	[
		'runtime',
		q{SELECT task_id::text, extract(epoch FROM lease_expires_at - clock_timestamp())::float8 AS left
		    FROM concurrency.dequeue('th', wait => '1 hour') LIMIT 1;}
	])
{
	my ($name, $sql) = @$case;
	my $s = start_waiter($name, $sql);
	ok(!holds_xmin($name), "$name: the sleeping waiter holds no xmin");
	is(dead_kept(), 0, "$name: vacuum removes rows that died while it sleeps");
	my $id = $node->safe_psql('postgres', q{SELECT concurrency.enqueue('th', '{}')});
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while ($s->{stdout} !~ /^$id(\||$)/m && time < $deadline) {
		$s->{run}->pump_nb;
		select(undef, undef, undef, 0.05);
	}
	like($s->{stdout}, qr/^$id(\||$)/m, "$name: woken by the commit, it claimed the task");
	like($s->query_safe('SELECT 1'), qr/^1$/m, "$name: the session goes on");
	$s->quit;
}
is($node->safe_psql('postgres', q{SELECT count(*) FILTER (WHERE state = 'leased' AND attempt = 1) || '/' || count(*) FROM concurrency."q_th"}),
	'2/2', 'each task claimed once');

# kept: in a transaction block, under an aggregate, under a user function
for my $case (
	[ 'block', 'BEGIN;', q{SELECT task_id FROM concurrency.dequeue('th', wait => '1 hour');} ],
	[ 'aggregate', q{SELECT count(*) FROM concurrency.dequeue('th', wait => '1 hour');} ],
	[ 'function', q{SELECT reads_hot(task_id) FROM concurrency.dequeue('th', wait => '1 hour');} ])
{
	my ($name, @sql) = @$case;
	my $s = start_waiter($name, @sql);
	ok(holds_xmin($name), "$name: the sleeping waiter keeps its xmin");
	cmp_ok(dead_kept(), '>=', 20, "$name: vacuum keeps the rows that died while it sleeps");
	$node->safe_psql('postgres', "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = '$name'");
	$node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = '$name' AND state = 'active'")
	  or die "$name did not stop";
	$s->quit;
}
is($node->safe_psql('postgres', q{SELECT leased FROM concurrency.queue_stats WHERE queue = 'th'}),
	'2', 'the cancelled waiters hold no lease');

$node->stop;
done_testing();
