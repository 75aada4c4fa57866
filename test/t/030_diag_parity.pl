# Parity with pg_blocking_pids on generated scenarios: sessions take random
# table locks (all eight modes), row locks and advisory locks, in random
# order, some behind prepared transactions; once every session is either
# done or waiting, the edges of concurrency.lock_waits must be exactly those of
# pg_blocking_pids() called for every backend, and lock_tree must agree with
# them. deadlock_timeout is an hour, so cycles stay and are checked too.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $seed = $ENV{DIAG_PARITY_SEED} // 20240607;
my $scenarios = $ENV{DIAG_PARITY_SCENARIOS} // 30;
srand($seed);
note "seed $seed, $scenarios scenarios";

my $node = PostgreSQL::Test::Cluster->new('parity');
$node->init;
$node->append_conf('postgresql.conf', qq(
max_connections = 60
max_prepared_transactions = 10
deadlock_timeout = '1h'
autovacuum = off
));
$node->start;
$node->safe_psql('postgres', q(
CREATE EXTENSION concurrency_ext;
CREATE TABLE t1 (id int PRIMARY KEY, v int);
CREATE TABLE t2 (id int PRIMARY KEY, v int);
CREATE TABLE t3 (id int PRIMARY KEY, v int);
INSERT INTO t1 SELECT g, 0 FROM generate_series(1, 3) g;
INSERT INTO t2 SELECT g, 0 FROM generate_series(1, 3) g;
INSERT INTO t3 SELECT g, 0 FROM generate_series(1, 3) g;
));

my @modes = ('ACCESS SHARE', 'ROW SHARE', 'ROW EXCLUSIVE', 'SHARE UPDATE EXCLUSIVE',
	'SHARE', 'SHARE ROW EXCLUSIVE', 'EXCLUSIVE', 'ACCESS EXCLUSIVE');

sub random_lock
{
	my $r = rand();
	my $table = 't' . (1 + int(rand(3)));
	my $row = 1 + int(rand(3));
	return "LOCK TABLE $table IN $modes[int(rand(@modes))] MODE" if $r < 0.45;
	return "SELECT FROM $table WHERE id = $row FOR " . (rand() < 0.5 ? 'UPDATE' : 'SHARE') if $r < 0.7;
	return "UPDATE $table SET v = v + 1 WHERE id = $row" if $r < 0.8;
	my $key = 1 + int(rand(2));
	return rand() < 0.5 ? "SELECT pg_advisory_xact_lock($key)" : "SELECT pg_advisory_xact_lock_shared($key)";
}

my $observer = $node->background_psql('postgres');

# Sends a statement without waiting for it; is_done() tells when it finished.
my $mark = 0;
sub send_sql
{
	my ($s, $sql) = @_;
	$s->{mark} = 'done ' . ++$mark;
	$s->{stdin} .= "$sql;\n\\echo '$s->{mark}'\n";
	$s->{run}->pump_nb;
}

sub is_done
{
	my ($s) = @_;
	$s->{run}->pump_nb;
	return $s->{stdout} =~ /\Q$s->{mark}\E/;
}

sub is_waiting
{
	my ($s) = @_;
	return $observer->query_safe(
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $s->{pid} AND wait_event_type = 'Lock'") eq '1';
}

# Waits until the statement has finished or waits for a lock; either state
# lasts, since nothing here ever releases a lock during a scenario.
sub settle
{
	my ($s) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		return 'done' if is_done($s);
		return 'waiting' if is_waiting($s);
		select(undef, undef, undef, 0.005);
	}
	die "session $s->{pid} neither finished nor waited";
}

my ($total_edges, $total_soft, $total_cycles, $total_prepared) = (0, 0, 0, 0);
for my $scenario (1 .. $scenarios)
{
	my @gids;
	if (rand() < 0.5)
	{
		# a prepared transaction holding a lock, then a second one sometimes
		for my $p (1 .. 1 + int(rand(2)))
		{
			my $gid = "diag_${scenario}_$p";
			my $lock = random_lock();
			$node->safe_psql('postgres', "BEGIN; $lock; PREPARE TRANSACTION '$gid'");
			push @gids, $gid;
		}
	}

	my @sessions;
	for (1 .. 4 + int(rand(7)))
	{
		my $s = $node->background_psql('postgres', on_error_stop => 0);
		$s->{pid} = $s->query_safe('SELECT pg_backend_pid()');
		$s->query_safe('BEGIN');
		$s->{state} = 'done';
		push @sessions, $s;
	}
	my @log;
	for (1 .. 8 + int(rand(10)))
	{
		my @free = grep { $_->{state} eq 'done' } @sessions;
		last unless @free;
		my $s = $free[int(rand(@free))];
		my $sql = random_lock();
		send_sql($s, $sql);
		$s->{state} = settle($s);
		push @log, "$s->{pid}: $sql ($s->{state})";
	}

	my $edges = $observer->query_safe(q(
		SELECT count(*) || ' ' || count(*) FILTER (WHERE NOT blocking_holds) || ' ' ||
		       count(*) FILTER (WHERE blocking_pid = 0)
		  FROM concurrency.lock_waits));
	my ($n, $soft, $prepared) = split / /, $edges;
	my $mismatches = $observer->query_safe(q(
		SELECT count(*) FROM (
		  (SELECT waiting_pid, blocking_pid FROM concurrency.lock_waits
		   EXCEPT SELECT pid, unnest(pg_blocking_pids(pid)) FROM pg_stat_activity)
		  UNION ALL
		  (SELECT pid, unnest(pg_blocking_pids(pid)) FROM pg_stat_activity
		   EXCEPT SELECT waiting_pid, blocking_pid FROM concurrency.lock_waits)) d));
	is($mismatches, '0', "scenario $scenario: the same $n edges as pg_blocking_pids")
	  or diag join("\n", @log);

	my $tree = $observer->query_safe(q(
		SELECT count(*) FILTER (WHERE
		         (SELECT array_agg(DISTINCT b ORDER BY b) FROM unnest(t.blocked_by) b)
		         IS DISTINCT FROM
		         (SELECT array_agg(DISTINCT b ORDER BY b) FROM unnest(pg_blocking_pids(t.pid)) b))
		       + count(*) FILTER (WHERE depth <> cardinality(path) - 1 OR path[1] <> root_pid
		                           OR path[cardinality(path)] <> pid)
		       + count(*) FILTER (WHERE depth = 0 AND cardinality(blocked_by) > 0 AND NOT in_cycle)
		  FROM concurrency.lock_tree t WHERE pid <> 0));
	is($tree, '0', "scenario $scenario: lock_tree agrees with pg_blocking_pids") or diag join("\n", @log);

	my $missing = $observer->query_safe(q(
		SELECT count(*) FROM (SELECT waiting_pid FROM concurrency.lock_waits
		                      EXCEPT SELECT pid FROM concurrency.lock_tree) m));
	is($missing, '0', "scenario $scenario: every waiting session is in the tree");

	$total_edges += $n;
	$total_soft += $soft;
	$total_prepared += $prepared;
	$total_cycles += $observer->query_safe('SELECT count(*) FROM concurrency.lock_tree WHERE in_cycle');

	# end of scenario: every session goes, taking its locks with it
	$observer->query_safe(
		'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid IN ('
		  . join(',', map { $_->{pid} } @sessions) . ')');
	$_->{run}->kill_kill for @sessions;
	$node->safe_psql('postgres', "ROLLBACK PREPARED '$_'") for @gids;
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid IN ("
		  . join(',', map { $_->{pid} } @sessions) . ")");
}
note "edges $total_edges, soft $total_soft, to prepared transactions $total_prepared, sessions in cycles $total_cycles";
cmp_ok($total_soft, '>', 0, 'the scenarios had soft edges (queued ahead)');
cmp_ok($total_prepared, '>', 0, 'the scenarios had prepared transactions as blockers');
cmp_ok($total_cycles, '>', 0, 'the scenarios had wait cycles');

$observer->quit;
$node->stop;
done_testing();
