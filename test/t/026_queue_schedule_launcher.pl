# The schedule launcher's start reads pg_database in a transaction of its
# own. When that read fails (here: a lock timeout, pg_database locked by a
# session while the background process starts again), the transaction is
# rolled back and the log says so; the next start, ten seconds later, begins
# outside any transaction and starts the runners. (0.3.0 left the transaction
# open: every later start failed with "StartTransactionCommand: unexpected
# state STARTED", and no schedule ran without a dequeue.)
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('launcher');
$node->init;
$node->append_conf(
	'postgresql.conf', q(
shared_preload_libraries = 'concurrency_ext'
lock_timeout = '200ms'
autovacuum = off
));
$node->start;
$node->safe_psql('postgres', q(
CREATE EXTENSION concurrency_ext;
SELECT concurrency.create_queue('tick', retain => '1 day');
));
my $host = $node->safe_psql('postgres',
	q(SELECT pid FROM pg_stat_activity WHERE backend_type = 'concurrency_ext background'));
like($host, qr/^\d+$/, 'the background process runs');

# pg_database locked; the background process terminated: the postmaster
# starts it again after 5 seconds, and its schedule launcher's read of
# pg_database times out. (While the lock is held, no new session can
# connect: the holder does everything.)
my $log_offset = -s $node->logfile;
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe('LOCK TABLE pg_database IN ACCESS EXCLUSIVE MODE');
$holder->query_safe("SELECT pg_terminate_backend($host)");
$node->wait_for_log(qr/schedule launcher: reading pg_database failed, its transaction rolled back: .*lock timeout/,
	$log_offset);
pass('the failed read of pg_database is logged, its transaction rolled back');
$holder->query_safe('COMMIT');
$holder->quit;

# A schedule written now wakes the launcher; its next start (10 seconds
# after the failed one) must begin outside a transaction, and the runner
# then enqueues the due times without any dequeue.
$node->safe_psql('postgres', q(SELECT concurrency.schedule('each_second', 'tick', every => '1 second')));
$node->poll_query_until('postgres', q(SELECT count(*) >= 2 FROM concurrency."q_tick"))
  or die 'no runner enqueued the due times after the failed start';
pass('the launcher started again after the failure and its runner enqueues the due times');
my $log = slurp_file($node->logfile, $log_offset);
unlike($log, qr/unexpected state/, 'no transaction was left open by the failed start');

$node->stop;
done_testing();
