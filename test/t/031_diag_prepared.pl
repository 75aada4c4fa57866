# Prepared transactions in the wait graph: they hold locks with no session
# behind them. pg_blocking_pids reports them as pid 0; so do the views, with
# their gid, owner and age, as roots whose action is ROLLBACK PREPARED — and
# that action, run as it is, frees the chain. The ALTER queued behind them,
# with a reader behind it, gets pg_cancel_backend: run first, it frees the
# reader and leaves the prepared transactions alone.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('prepared');
$node->init;
$node->append_conf('postgresql.conf', "max_prepared_transactions = 5\nautovacuum = off\n");
$node->start;
$node->safe_psql('postgres', q(
CREATE EXTENSION concurrency_ext;
CREATE TABLE accounts (id int PRIMARY KEY);
BEGIN; LOCK TABLE accounts IN ROW EXCLUSIVE MODE; PREPARE TRANSACTION 'diag_one';
BEGIN; LOCK TABLE accounts IN SHARE UPDATE EXCLUSIVE MODE; PREPARE TRANSACTION 'diag_two''s';
));

my $alter = $node->background_psql('postgres');
$alter->query_safe("SET application_name = 'alter'");
$alter->{stdin} .= "\\set ON_ERROR_STOP 0\nALTER TABLE accounts ADD COLUMN note text;\n\\echo 'alter done'\n";
$alter->{run}->pump_nb;
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'alter' AND wait_event_type = 'Lock'");
my $reader = $node->background_psql('postgres');
$reader->query_safe("SET application_name = 'reader'");
$reader->{stdin} .= "SELECT count(*) FROM accounts;\n\\echo 'reader done'\n";
$reader->{run}->pump_nb;
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'reader' AND wait_event_type = 'Lock'");

my $owner = $node->safe_psql('postgres', 'SELECT current_user');
my $alter_pid = $node->safe_psql('postgres', "SELECT pid FROM pg_stat_activity WHERE application_name = 'alter'");
is( $node->safe_psql(
		'postgres', q(
SELECT waiting_application, blocking_pid, blocking_gid, blocking_state, blocking_user, blocking_mode,
       blocking_holds, blocking_application IS NULL, blocking_query IS NULL, blocking_xact_age > '0'
  FROM concurrency.lock_waits ORDER BY waiting_application, blocking_gid)),
	"alter|0|diag_one|prepared|$owner|RowExclusiveLock|t|t|t|t\n"
	  . "alter|0|diag_two's|prepared|$owner|ShareUpdateExclusiveLock|t|t|t|t\n"
	  . "reader|$alter_pid||active|$owner|AccessExclusiveLock|f|f|f|t",
	'lock_waits shows both prepared transactions as pid 0 with their gid');

is( $node->safe_psql(
		'postgres', q(
SELECT coalesce(gid, (SELECT application_name FROM pg_stat_activity a WHERE a.pid = t.pid)),
       depth, cardinality(blocked_by), blocks_total, state, action
  FROM concurrency.lock_tree t ORDER BY depth, gid)),
	"diag_one|0|0|2|prepared|ROLLBACK PREPARED 'diag_one'\n"
	  . "diag_two's|0|0|2|prepared|ROLLBACK PREPARED 'diag_two''s'\n"
	  . "alter|1|2|1|active|SELECT pg_cancel_backend($alter_pid)\n"
	  . "reader|2|1|0|active|",
	'lock_tree has two prepared roots with ROLLBACK PREPARED actions, and pg_cancel_backend for the ALTER queued behind them');

is( $node->safe_psql(
		'postgres',
		'SELECT count(*) FROM concurrency.lock_tree t WHERE pid = 0 AND root_pid = 0 AND path = ARRAY[0] AND xact_age > \'0\''
	),
	'2',
	'prepared roots have pid 0, a path of their own and an age');

# the roots' actions, read while the chain is there
my @root_actions = split /\n/,
  $node->safe_psql('postgres', 'SELECT action FROM concurrency.lock_tree WHERE depth = 0');

# the ALTER's action, exactly as the view prints it: the reader goes on, the
# roots keep their transactions
$node->safe_psql('postgres',
	$node->safe_psql('postgres', 'SELECT action FROM concurrency.lock_tree WHERE depth > 0 AND action IS NOT NULL'));
$alter->{run}->pump until $alter->{stdout} =~ /alter done/;
$reader->{run}->pump until $reader->{stdout} =~ /reader done/;
like($alter->{stderr}, qr/canceling statement due to user request/, 'the ALTER was cancelled');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'), '2',
	'cancelling the queued ALTER freed the reader, and both prepared transactions are still there');

# then the roots' actions, exactly as the view printed them
for my $action (@root_actions)
{
	$node->safe_psql('postgres', $action);
}
pass('running the actions freed the chain');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'), '0', 'no prepared transaction left');
is($node->safe_psql('postgres', 'SELECT count(*) FROM concurrency.lock_waits'), '0', 'nobody waits any more');

$alter->quit;
$reader->quit;
$node->stop;
done_testing();
