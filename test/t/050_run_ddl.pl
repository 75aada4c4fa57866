# CALL concurrency.run_ddl against real blockers, in other sessions:
#  - an idle-in-transaction holder: run_ddl waits without queueing (readers
#    keep reading, run_ddl holds no lock and waits for none), its NOTICE
#    names the holder (pid, application, state, transaction age, query),
#    once per blocker per 5 s; it succeeds once the holder commits;
#  - terminate_blockers_after terminates an idle-in-transaction holder and
#    cancels an active one, each reported and logged;
#  - giving up after max_duration: 55P03 naming the attempts, the time
#    waited and the session in the way longest; nothing changed;
#  - a steady stream of short readers does not starve it.
use strict;
use warnings;
use IPC::Run;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('run_ddl');
$node->init;
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION concurrency_ext;
	CREATE TABLE t (id int);
	INSERT INTO t SELECT generate_series(1, 10);
});

# Starts a psql running `sql` as application "migration"; returns the
# harness and references to its stdout and stderr.
sub start_psql
{
	my ($sql, $app) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
		  '-c', "SET application_name = '" . ($app // 'migration') . "'", '-c', $sql ],
		'>', \$out, '2>', \$err);
	return ($h, \$out, \$err);
}

sub column_exists
{
	my ($column) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_attribute WHERE attrelid = 't'::regclass AND attname = '$column'");
}

sub last_log
{
	return $node->safe_psql('postgres', q{
		SELECT format('%s attempts=%s terminated=%s', outcome, attempts, blockers_terminated)
		  FROM concurrency.ddl_log ORDER BY id DESC LIMIT 1});
}

sub holder
{
	my ($app) = @_;
	my $session = $node->background_psql('postgres', on_error_stop => 0);
	$session->query_safe("SET application_name = '$app'");
	my $pid = $session->query_safe('BEGIN; SELECT count(*) FROM t; SELECT pg_backend_pid()');
	$pid =~ s/.*\n//s;
	$pid =~ s/\D//g;
	return ($session, $pid);
}

# --- an idle-in-transaction holder ------------------------------------------

my ($holder, $holder_pid) = holder('holder');
my ($call, $out, $err) = start_psql(
	q{CALL concurrency.run_ddl('ALTER TABLE t ADD COLUMN c1 int', lock_timeout => '200ms')});
$node->poll_query_until('postgres',
	q{SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = 'migration' AND state = 'active'})
  or die 'run_ddl did not start';
for my $round (1 .. 4)
{
	is($node->safe_psql('postgres', q{SET statement_timeout = '1s'; SELECT count(*) FROM t}),
		'10', "readers are not stalled while run_ddl waits (round $round)");
	is($node->safe_psql('postgres', q{
		SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		 WHERE a.application_name = 'migration' AND l.locktype = 'relation'
		   AND l.relation = 't'::regclass}),
		'0', "run_ddl neither holds nor queues for a lock on the table while it waits (round $round)");
	usleep(400_000);
}
is(column_exists('c1'), '0', 'nothing changed while the holder is there');
$holder->query_safe('COMMIT');
ok($call->finish, 'run_ddl succeeded once the holder committed');
is(column_exists('c1'), '1', 'the column was added');
like($$err, qr/NOTICE:  run_ddl: attempt 1: AccessExclusiveLock on public\.t is taken; waiting without queueing; next attempt in \d+ ms/,
	'the first failed attempt is reported');
like($$err, qr/In the way: pid $holder_pid \(application "holder", state "idle in transaction", transaction open for [0-9.]+ m?s, query "SELECT pg_backend_pid\(\) ;"\) holds AccessShareLock on public\.t\./,
	'the NOTICE names the holder: pid, application, state, transaction age, query');
like($$err, qr/NOTICE:  run_ddl: done in \d+ attempts, [0-9.]+ (ms|s) waited/, 'success is reported');
my ($attempts, $waited, $unit) = $$err =~ /done in (\d+) attempts, ([0-9.]+) (ms|s) waited/;
$waited /= 1000 if $unit eq 'ms';
my $mentions = () = $$err =~ /In the way: pid $holder_pid /g;
ok($mentions >= 1 && $mentions <= 1 + int($waited / 5) && $mentions < $attempts,
	"one NOTICE per blocker per 5 s: $mentions in $attempts attempts over $waited s");
like(last_log(), qr/^done attempts=([2-9]|\d\d+) terminated=\{\}$/, 'ddl_log: done, several attempts');
$holder->quit;

# --- terminate_blockers_after: an idle-in-transaction holder is terminated ---

($holder, $holder_pid) = holder('idle holder');
my ($ok, $stdout, $stderr) = ('', '', '');
$stderr = '';
$node->psql('postgres',
	q{CALL concurrency.run_ddl('ALTER TABLE t ADD COLUMN c2 int', lock_timeout => '100ms', terminate_blockers_after => '500ms')},
	stderr => \$stderr, on_error_stop => 1);
like($stderr, qr/NOTICE:  run_ddl: terminated pid $holder_pid after terminate_blockers_after \(500 ms\): pid $holder_pid \(application "idle holder", state "idle in transaction"/,
	'the idle-in-transaction holder is terminated, and reported');
is(column_exists('c2'), '1', 'then the column was added');
is(last_log(), "done attempts=" . ($stderr =~ /done in (\d+) attempts/)[0] . " terminated={$holder_pid}",
	'ddl_log lists the terminated pid');
$node->poll_query_until('postgres', "SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $holder_pid)")
  or die 'terminated holder still there';
eval { $holder->quit };

# --- terminate_blockers_after: an active holder's query is cancelled ----------

my ($busy, $busy_out, $busy_err) = start_psql(q{SELECT pg_sleep(60) FROM t LIMIT 1}, 'busy reader');
$node->poll_query_until('postgres',
	q{SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = 'busy reader' AND wait_event = 'PgSleep'})
  or die 'busy reader did not start';
$stderr = '';
$node->psql('postgres',
	q{CALL concurrency.run_ddl('ALTER TABLE t ADD COLUMN c3 int', lock_timeout => '100ms', terminate_blockers_after => '300ms')},
	stderr => \$stderr, on_error_stop => 1);
like($stderr, qr/NOTICE:  run_ddl: cancelled the query of pid \d+ after terminate_blockers_after \(300 ms\): pid \d+ \(application "busy reader", state "active"/,
	'the active holder is cancelled, and reported');
$busy->finish;
like($$busy_err, qr/canceling statement due to user request/, 'the reader saw its query cancelled');
is(column_exists('c3'), '1', 'then the column was added');

# --- giving up ----------------------------------------------------------------

($holder, $holder_pid) = holder('long holder');
$stderr = '';
my $rc = $node->psql('postgres',
	q{\set VERBOSITY verbose
	  CALL concurrency.run_ddl('ALTER TABLE t ADD COLUMN c4 int', lock_timeout => '100ms', max_duration => '1s')},
	stderr => \$stderr);
isnt($rc, 0, 'run_ddl fails when max_duration passes');
like($stderr, qr/ERROR:  55P03: run_ddl gave up: its locks were not obtained within max_duration \(1 s\)/,
	'with 55P03');
like($stderr, qr/DETAIL:  \d+ attempts, [0-9.]+ (ms|s) waited\. In the way longest: pid $holder_pid \(application "long holder", state "idle in transaction".*\), in the way for [0-9.]+ (ms|s)\./,
	'naming the attempts, the time waited and the session in the way longest');
is(column_exists('c4'), '0', 'nothing changed');
like(last_log(), qr/^gave up attempts=\d+ terminated=\{\}$/, 'ddl_log: gave up');
$holder->query_safe('COMMIT');
$holder->quit;

# --- a steady stream of short readers -------------------------------------------

my @readers;
for my $n (1 .. 3)
{
	push @readers, [ start_psql(q{DO $$BEGIN FOR i IN 1..60 LOOP PERFORM count(*) FROM t, pg_sleep(0.05); COMMIT; END LOOP; END$$},
		"reader $n") ];
}
$node->poll_query_until('postgres',
	q{SELECT count(*) = 3 FROM pg_stat_activity WHERE application_name LIKE 'reader %'})
  or die 'readers did not start';
$stderr = '';
$rc = $node->psql('postgres',
	q{CALL concurrency.run_ddl('ALTER TABLE t ADD COLUMN c5 int', lock_timeout => '500ms', max_duration => '20s')},
	stderr => \$stderr);
is($rc, 0, 'run_ddl is not starved by a stream of short readers');
is(column_exists('c5'), '1', 'the column was added among the readers');
for my $reader (@readers)
{
	ok($reader->[0]->finish, 'each reader ran to its end without an error');
}

$node->stop;
done_testing();
