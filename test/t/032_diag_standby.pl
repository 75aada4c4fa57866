# On a hot standby: a query waiting for the AccessExclusiveLock that the
# startup process holds on behalf of a primary transaction shows the startup
# process as its root blocker, the same edge as pg_blocking_pids; advisory
# locks between standby sessions show by subsystem name (the registry is
# read on the standby too).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', "autovacuum = off\n");
$primary->start;
$primary->safe_psql('postgres', q(
CREATE EXTENSION concurrency_ext;
CREATE TABLE accounts (id int PRIMARY KEY);
INSERT INTO accounts VALUES (1);
INSERT INTO concurrency.subsystem (name, key, slot) VALUES ('diag_standby', 9101, 16901);
));
$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
# the waiting query must not be cancelled by the replay conflict while we look
$standby->append_conf('postgresql.conf', "max_standby_streaming_delay = -1\n");
$standby->start;
$primary->wait_for_catchup($standby);

# a primary transaction takes AccessExclusiveLock; the standby replays it
my $ddl = $primary->background_psql('postgres');
$ddl->query_safe('BEGIN');
$ddl->query_safe('LOCK TABLE accounts IN ACCESS EXCLUSIVE MODE');
$primary->safe_psql('postgres', 'CREATE TABLE flush_wal ()');    # commits, so the lock record is sent
$primary->wait_for_catchup($standby);
$standby->poll_query_until('postgres', q(
SELECT count(*) = 1 FROM pg_locks
 WHERE relation = 'accounts'::regclass AND mode = 'AccessExclusiveLock' AND granted));

my $reader = $standby->background_psql('postgres');
$reader->query_safe("SET application_name = 'standby_reader'");
$reader->{stdin} .= "SELECT count(*) FROM accounts;\n\\echo 'reader done'\n";
$reader->{run}->pump_nb;
$standby->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'standby_reader' AND wait_event_type = 'Lock'");

my $startup = $standby->safe_psql('postgres', "SELECT pid FROM pg_stat_activity WHERE backend_type = 'startup'");
is( $standby->safe_psql(
		'postgres', q(
SELECT waiting_application, waiting_mode, locked_object, blocking_pid, blocking_mode, blocking_holds
  FROM concurrency.lock_waits)),
	"standby_reader|AccessShareLock|public.accounts|$startup|AccessExclusiveLock|t",
	'the standby reader waits for the startup process');
is( $standby->safe_psql(
		'postgres', q(
SELECT count(*) FROM (
  (SELECT waiting_pid, blocking_pid FROM concurrency.lock_waits
   EXCEPT SELECT pid, unnest(pg_blocking_pids(pid)) FROM pg_stat_activity)
  UNION ALL
  (SELECT pid, unnest(pg_blocking_pids(pid)) FROM pg_stat_activity
   EXCEPT SELECT waiting_pid, blocking_pid FROM concurrency.lock_waits)) d)),
	'0',
	'the same edges as pg_blocking_pids on the standby');
is( $standby->safe_psql(
		'postgres', 'SELECT pid, depth, blocks_total FROM concurrency.lock_tree ORDER BY depth'),
	"$startup|0|1\n" . $standby->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE application_name = 'standby_reader'") . "|1|0",
	'the startup process is the root of the tree');

$ddl->query_safe('COMMIT');
$reader->{run}->pump until $reader->{stdout} =~ /reader done/;
pass('the reader went on once the primary committed');

# advisory locks between standby sessions, named from the replicated registry
my $holder = $standby->background_psql('postgres');
$holder->query_safe("SET application_name = 'standby_holder'");
$holder->query_safe('SELECT pg_advisory_lock(9101)');
$reader->{stdin} .= "SELECT pg_advisory_lock(9101);\n\\echo 'advisory done'\n";
$reader->{run}->pump_nb;
$standby->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'standby_reader' AND wait_event_type = 'Lock'");
is( $standby->safe_psql(
		'postgres', q(
SELECT waiting_application, locked_object, blocking_application, blocking_state FROM concurrency.lock_waits)),
	'standby_reader|subsystem diag_standby|standby_holder|idle',
	'advisory waits on the standby show the subsystem name');
$holder->query_safe('SELECT pg_advisory_unlock_all()');
$reader->{run}->pump until $reader->{stdout} =~ /advisory done/;

$holder->quit;
$reader->quit;
$ddl->quit;
$standby->stop;
$primary->stop;
done_testing();
