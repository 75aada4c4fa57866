# dequeue(…, wait) with the module preloaded: a transaction that claimed
# tasks and rolls back makes them ready again, and wakes as many waiters of
# the queue as it claimed tasks, as a commit of that many enqueued tasks
# does; so does a rollback to a savepoint (or a PL/pgSQL exception block)
# that claimed them. The waiters' waits (10 minutes) and the poll interval
# (an hour) are far longer than the polls here: without the wake-up they
# would sleep on until the test gives up.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('wait_abort');
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
SELECT concurrency.create_queue('ta');
));

my $waiting_sql = q{SELECT count(*) FROM pg_stat_activity
 WHERE state = 'active' AND wait_event_type = 'Extension' AND query LIKE '%concurrency.dequeue(''ta''%'};

# Starts n sessions, each in a dequeue of one task that waits up to 10
# minutes, and returns when they all sleep.
sub start_waiters {
	my ($n) = @_;
	my @waiters;
	for (1 .. $n) {
		my $s = $node->background_psql('postgres', on_error_stop => 0);
		$s->{stdin} .= "SELECT 'got ' || task_id FROM concurrency.dequeue('ta', wait => '10 min');\n";
		$s->{run}->pump_nb;
		push @waiters, $s;
	}
	$node->poll_query_until('postgres', "SELECT ($waiting_sql) = $n") or die "the $n waiters do not wait";
	return @waiters;
}

# The task ids the woken waiters claimed, sorted (each returns at once when
# woken; the waiters are ended).
sub claimed_by {
	my @got;
	for my $s (@_) {
		push @got, $s->query('SELECT 1') =~ /^got (\d+)$/mg;
		$s->quit;
	}
	return join ',', sort { $a <=> $b } @got;
}

my $holder = $node->background_psql('postgres');

# 1. A transaction claims two tasks, two sessions wait, it rolls back: both
# waiters are woken and claim the two tasks.
my $ids = $node->safe_psql('postgres',
	q(SELECT string_agg(id::text, ',' ORDER BY id) FROM concurrency.enqueue_batch('ta', array_fill('{}'::jsonb, ARRAY[2])) AS id));
$holder->query_safe('BEGIN');
is($holder->query_safe(q(SELECT count(*) FROM concurrency.dequeue('ta', batch => 2))), '2', 'the holder claimed both tasks');
my @waiters = start_waiters(2);
$holder->query_safe('ROLLBACK');
ok($node->poll_query_until('postgres', "SELECT ($waiting_sql) = 0"),
	'the rollback of a claim of two tasks woke both waiters');
is(claimed_by(@waiters), $ids, 'the woken waiters claimed the two tasks rolled back');

# 2. A rollback to a savepoint that claimed the task wakes a waiter while
# the holder's transaction goes on.
my $id = $node->safe_psql('postgres', q(SELECT concurrency.enqueue('ta', '{}')));
$holder->query_safe('BEGIN');
$holder->query_safe('SAVEPOINT s');
is($holder->query_safe(q(SELECT count(*) FROM concurrency.dequeue('ta'))), '1', 'the holder claimed the task in a savepoint');
@waiters = start_waiters(1);
$holder->query_safe('ROLLBACK TO SAVEPOINT s');
ok($node->poll_query_until('postgres', "SELECT ($waiting_sql) = 0"),
	'the rollback to the savepoint woke the waiter');
is(claimed_by(@waiters), $id, 'the woken waiter claimed the task');
$holder->query_safe('COMMIT');

# 3. A handler that raised after claiming, in a PL/pgSQL exception block
# (a subtransaction rolled back), inside a transaction that goes on. The
# handler waits for an advisory lock between its claim and its error, so
# that the waiter sleeps before the claim is rolled back.
$id = $node->safe_psql('postgres', q(SELECT concurrency.enqueue('ta', '{}')));
my $gate = $node->background_psql('postgres');
$gate->query_safe('SELECT pg_advisory_lock(42)');
$holder->query_safe('BEGIN');
$holder->{stdin} .= q(DO $$
BEGIN
  BEGIN
    PERFORM concurrency.dequeue('ta');
    PERFORM pg_advisory_lock(42);
    RAISE EXCEPTION 'handler failed';
  EXCEPTION WHEN raise_exception THEN
    NULL;
  END;
END $$;
);
$holder->{run}->pump_nb;
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'advisory' AND query LIKE 'DO %'})
  or die 'the handler does not wait for the lock';
@waiters = start_waiters(1);
$gate->query_safe('SELECT pg_advisory_unlock(42)');
ok($node->poll_query_until('postgres', "SELECT ($waiting_sql) = 0"),
	'the exception block\'s rollback woke the waiter');
is(claimed_by(@waiters), $id, 'the woken waiter claimed the task');
$holder->query_safe('COMMIT');
$gate->quit;

# 4. A claim in a savepoint that was released belongs to the transaction:
# a later savepoint's rollback (which claimed nothing) wakes nobody for it,
# the transaction's rollback wakes its waiter.
$id = $node->safe_psql('postgres', q(SELECT concurrency.enqueue('ta', '{}')));
$holder->query_safe('BEGIN');
$holder->query_safe('SAVEPOINT s');
is($holder->query_safe(q(SELECT count(*) FROM concurrency.dequeue('ta'))), '1', 'the holder claimed the task in a savepoint');
$holder->query_safe('RELEASE SAVEPOINT s');
$holder->query_safe('SAVEPOINT t');
$holder->query_safe('ROLLBACK TO SAVEPOINT t');
@waiters = start_waiters(1);
$holder->query_safe('ROLLBACK');
ok($node->poll_query_until('postgres', "SELECT ($waiting_sql) = 0"),
	'the rollback of a claim made in a released savepoint woke the waiter');
is(claimed_by(@waiters), $id, 'the woken waiter claimed the task');

$holder->quit;
$node->stop;
done_testing();
