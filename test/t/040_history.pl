# Lock-wait history with the module preloaded: episodes of an idle-in-
# transaction root with a DDL and readers queued behind it (released, and
# root_exited, also with the terminated root still listed after its locks
# went), a deadlock cycle, the ring wrapping, masking for roles
# without pg_read_all_stats, the LOG line, reload of the interval, the
# sampler terminated (it takes up the open episode) and killed (the server
# restarts everything and the sampler comes back), and the server-start
# setting validated.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('history');
$node->init;
$node->append_conf(
	'postgresql.conf', q(
shared_preload_libraries = 'concurrency_ext'
concurrency.history_interval = '20ms'
concurrency.history_size = 8
concurrency.history_log_min_duration = 0
deadlock_timeout = '1s'
autovacuum = off
restart_after_crash = on
));
$node->start;
$node->safe_psql('postgres', q(
CREATE EXTENSION concurrency_ext;
CREATE TABLE accounts (id int PRIMARY KEY);
CREATE TABLE a (id int);
CREATE TABLE b (id int);
CREATE ROLE peeker LOGIN;
CREATE ROLE stats_reader LOGIN IN ROLE pg_read_all_stats;
GRANT USAGE ON SCHEMA concurrency TO peeker, stats_reader;
));

# A session that stays open, named by its application_name.
sub session {
	my ($name) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe("SET application_name = '$name'");
	return $s;
}

# Sends a statement without waiting for it, then waits until it waits for a lock.
sub send_and_wait_for_lock {
	my ($s, $name, $sql) = @_;
	$s->{stdin} .= "$sql\n";
	$s->{run}->pump_nb;
	$node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = '$name' AND wait_event_type = 'Lock'")
	  or die "$name does not wait";
}

sub pid_of {
	my ($name) = @_;
	return $node->safe_psql('postgres', "SELECT pid FROM pg_stat_activity WHERE application_name = '$name'");
}

# --- an idle-in-transaction root, an ALTER queued behind it, readers behind the ALTER
my $root = session('root');
$root->query_safe('BEGIN');
$root->query_safe('SELECT count(*) FROM accounts');
my $root_pid = pid_of('root');
my $alter = session('alter');
send_and_wait_for_lock($alter, 'alter', 'ALTER TABLE accounts ADD COLUMN note text;');
my @readers;
for my $i (1 .. 2) {
	my $r = session("reader$i");
	send_and_wait_for_lock($r, "reader$i", 'SELECT count(*) FROM accounts;');
	push @readers, $r;
}
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM concurrency.lock_history WHERE root_pid = $root_pid AND max_waiters = 3")
  or die 'no episode with 3 waiters';
is( $node->safe_psql(
		'postgres', qq(
SELECT database, root_user = current_user, root_application, root_state,
       root_query LIKE 'SELECT count(*) FROM accounts%', root_xact_start IS NOT NULL,
       max_waiters, max_depth, locked_objects, ended_at IS NULL, ended_by IS NULL, in_cycle,
       'ALTER TABLE accounts ADD COLUMN note text;' = ANY (waiting_queries),
       longest_wait > '0', waiter_seconds > 0, duration >= '0'
  FROM concurrency.lock_history WHERE root_pid = $root_pid)),
	'postgres|t|root|idle in transaction|t|t|3|2|{public.accounts}|t|t|f|t|t|t|t',
	'an open episode: the idle-in-transaction root, 3 waiters, 2 deep, the table');

$root->query_safe('COMMIT');
$node->poll_query_until('postgres',
	"SELECT ended_by = 'released' FROM concurrency.lock_history WHERE root_pid = $root_pid")
  or die 'the episode did not end';
is( $node->safe_psql(
		'postgres', qq(
SELECT count(*), min(ended_by), bool_and(ended_at >= started_at), bool_and(duration = ended_at - started_at)
  FROM concurrency.lock_history WHERE root_pid = $root_pid)),
	'1|released|t|t',
	'after COMMIT: one episode for that root, ended_by released');
$node->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock'");
my $log = slurp_file($node->logfile);
like(
	$log,
	qr/LOG:  lock wait episode \d+ ended \(released\) after [0-9.]+ s: root blocker pid $root_pid \(application "root", state "idle in transaction"\) blocked up to 3 sessions \(waiters: [0-9, ]+\); root query: SELECT count\(\*\) FROM accounts ;\n/,
	'the LOG line names the root, its application, state and query, the waiters and the duration');

# A root that holds the table in SHARE mode in an open transaction, the
# ALTER queued behind it; returns the root's pid and its open episode's id.
sub share_root_with_alter {
	my ($s, $name, $alter_sql) = @_;
	$s->query_safe('BEGIN');
	$s->query_safe('LOCK TABLE accounts IN SHARE MODE');
	my $pid = pid_of($name);
	send_and_wait_for_lock($alter, 'alter', $alter_sql);
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM concurrency.lock_history WHERE root_pid = $pid AND ended_at IS NULL")
	  or die 'no open episode';
	return ($pid, $node->safe_psql('postgres',
		"SELECT episode_id FROM concurrency.lock_history WHERE root_pid = $pid AND ended_at IS NULL"));
}

# --- the root terminated
($root_pid, my $exited) = share_root_with_alter($root, 'root', 'ALTER TABLE accounts DROP COLUMN note;');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($root_pid)");
$node->poll_query_until('postgres',
	"SELECT ended_by = 'root_exited' FROM concurrency.lock_history WHERE episode_id = $exited")
  or die 'the episode did not end';
pass('after pg_terminate_backend: ended_by root_exited');

# --- the root committed and disconnected between two samples: the sampler
# finds it gone, and cannot tell that from a termination (root_exited too).
# Sampling is paused around the commit so that no sample falls in between.
my $leaver = session('leaver');
my ($leaver_pid, $left) = share_root_with_alter($leaver, 'leaver', 'ALTER TABLE accounts ADD COLUMN note text;');
$node->safe_psql('postgres', "ALTER SYSTEM SET concurrency.history_interval = 0");
$node->reload;
$node->poll_query_until('postgres', "SELECT interval_ms = 0 FROM concurrency.lock_history_status()")
  or die 'sampling did not stop';
$leaver->query_safe('COMMIT');
$leaver->quit;
$node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $leaver_pid")
  or die 'the root did not leave';
$node->safe_psql('postgres', "ALTER SYSTEM SET concurrency.history_interval = '20ms'");
$node->reload;
$node->poll_query_until('postgres', "SELECT ended_at IS NOT NULL FROM concurrency.lock_history WHERE episode_id = $left")
  or die 'the episode did not end';
is($node->safe_psql('postgres', "SELECT ended_by FROM concurrency.lock_history WHERE episode_id = $left"),
	'root_exited', 'a root that committed and disconnected between two samples: ended_by root_exited');

# --- the root terminated, and still in pg_stat_activity when its episode
# ends: a backend lets go of its transaction's locks early on its way out and
# leaves the backend status array last. A session with a temporary table
# drops it in between; a lock held on that table keeps it there, so every
# sample sees the ALTER through and the root still listed.
my $slow = session('slow');
$slow->query_safe('CREATE TEMP TABLE scratch (id int)');
my ($slow_pid, $slow_exit) = share_root_with_alter($slow, 'slow', 'ALTER TABLE accounts DROP COLUMN note;');
my $pin = session('pin');
$pin->query_safe('BEGIN');
$pin->query_safe('LOCK TABLE '
	  . $node->safe_psql('postgres', "SELECT oid::regclass FROM pg_class WHERE relname = 'scratch' AND relpersistence = 't'")
	  . ' IN ACCESS SHARE MODE');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($slow_pid)");
$node->poll_query_until('postgres', "SELECT ended_at IS NOT NULL FROM concurrency.lock_history WHERE episode_id = $slow_exit")
  or die 'the episode did not end';
is( $node->safe_psql(
		'postgres', qq(
SELECT h.ended_by, a.wait_event_type
  FROM concurrency.lock_history h, pg_stat_activity a WHERE h.episode_id = $slow_exit AND a.pid = $slow_pid)),
	'root_exited|Lock',
	'a terminated root still listed while it drops its temporary table: ended_by root_exited');
$pin->query_safe('COMMIT');
$node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $slow_pid")
  or die 'the root did not leave';
$pin->quit;

# --- masking: other roles' query text and details, as in pg_stat_activity
my $masked = q(
SELECT root_user IS NOT NULL, root_application, root_state, split_part(root_query, E'\n', 1), root_xact_start,
       root_client_addr, (SELECT bool_and(q = '<insufficient privilege>') FROM unnest(waiting_queries) q)
  FROM concurrency.lock_history WHERE episode_id = %d);
is($node->safe_psql('postgres', sprintf($masked, $exited), extra_params => [ '-U', 'peeker' ]),
	"t|root||<insufficient privilege>|||t", 'a role without pg_read_all_stats sees no query text, state or start');
is( $node->safe_psql('postgres', sprintf($masked, $exited), extra_params => [ '-U', 'stats_reader' ]),
	"t|root|idle in transaction|LOCK TABLE accounts IN SHARE MODE|" . $node->safe_psql('postgres',
		"SELECT root_xact_start FROM concurrency.lock_history WHERE episode_id = $exited") . '||f',
	'a member of pg_read_all_stats sees them');
# the role's own session is not masked for it
my $own = $node->background_psql('postgres', on_error_stop => 0, extra_params => [ '-U', 'peeker' ]);
$own->query_safe("SET application_name = 'own'");
$own->query_safe('BEGIN');
$own->query_safe('SELECT pg_advisory_xact_lock(42)');
my $own_pid = pid_of('own');
my $waiter = session('waiter');
send_and_wait_for_lock($waiter, 'waiter', 'SELECT pg_advisory_xact_lock(42);');
$node->poll_query_until('postgres', "SELECT count(*) = 1 FROM concurrency.lock_history WHERE root_pid = $own_pid")
  or die 'no episode';
is( $node->safe_psql(
		'postgres', "SELECT split_part(root_query, E'\n', 1), waiting_queries, locked_objects FROM concurrency.lock_history WHERE root_pid = $own_pid",
		extra_params => [ '-U', 'peeker' ]),
	'SELECT pg_advisory_xact_lock(42)|{"<insufficient privilege>"}|{"advisory lock 42"}',
	"a role sees its own session's query, not the others'");
$own->query_safe('COMMIT');
$own->quit;

# --- a deadlock cycle
my $s1 = session('cycle1');
my $s2 = session('cycle2');
$s1->query_safe('BEGIN');
$s1->query_safe('LOCK TABLE a');
$s2->query_safe('BEGIN');
$s2->query_safe('LOCK TABLE b');
my ($p1, $p2) = (pid_of('cycle1'), pid_of('cycle2'));
send_and_wait_for_lock($s1, 'cycle1', 'LOCK TABLE b;');
$s2->{stdin} .= "LOCK TABLE a;\n";
$s2->{run}->pump_nb;
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM concurrency.lock_history WHERE root_pid IN ($p1, $p2) AND in_cycle AND ended_by IS NOT NULL")
  or die 'no ended cycle episode';
is( $node->safe_psql(
		'postgres',
		"SELECT root_pid = least($p1, $p2), max_waiters, ended_by, locked_objects <@ '{public.a,public.b}' FROM concurrency.lock_history WHERE root_pid IN ($p1, $p2) AND in_cycle"
	),
	't|1|released|t',
	'a deadlock cycle is one episode, rooted at its lowest pid, in_cycle, released when the detector breaks it');
$s1->query('ROLLBACK');
$s2->query('ROLLBACK');

# --- the ring keeps the newest history_size (8) episodes
$node->safe_psql('postgres', 'SELECT concurrency.lock_history_reset()');
is($node->safe_psql('postgres', 'SELECT count(*) FROM concurrency.lock_history'), '0', 'reset empties the history');
my $holder = session('holder');
my $last_id;
for my $i (1 .. 11) {
	$holder->query_safe('BEGIN');
	$holder->query_safe('SELECT pg_advisory_xact_lock(7)');
	send_and_wait_for_lock($waiter, 'waiter', 'BEGIN; SELECT pg_advisory_xact_lock(7);');
	my $hpid = pid_of('holder');
	$node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM concurrency.lock_history WHERE root_pid = $hpid AND ended_at IS NULL")
	  or die "episode $i not seen";
	$last_id = $node->safe_psql('postgres', "SELECT episode_id FROM concurrency.lock_history WHERE ended_at IS NULL");
	$holder->query_safe('COMMIT');
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM concurrency.lock_history WHERE ended_at IS NULL")
	  or die "episode $i did not end";
	$waiter->query('COMMIT');
}
is( $node->safe_psql('postgres', 'SELECT count(*), max(episode_id) - min(episode_id), max(episode_id) FROM concurrency.lock_history'),
	"8|7|$last_id", 'after 11 episodes the ring holds the 8 newest');
my $recorded = $node->safe_psql('postgres', 'SELECT episodes_recorded FROM concurrency.lock_history_status()');
cmp_ok($recorded, '>=', 11, 'the status counts every episode since the reset');

# --- reload: interval 0 stops sampling, a new value restarts it
$node->safe_psql('postgres', "ALTER SYSTEM SET concurrency.history_interval = 0");
$node->reload;
$node->poll_query_until('postgres', "SELECT interval_ms = 0 FROM concurrency.lock_history_status()");
my $before = $node->safe_psql('postgres', 'SELECT samples FROM concurrency.lock_history_status()');
sleep 1;
my $after = $node->safe_psql('postgres', 'SELECT samples FROM concurrency.lock_history_status()');
ok($after - $before <= 1, 'interval 0: no more samples');
$node->safe_psql('postgres', "ALTER SYSTEM SET concurrency.history_interval = '20ms'");
$node->reload;
$node->poll_query_until('postgres', "SELECT samples > $after + 5 FROM concurrency.lock_history_status()")
  or die 'sampling did not start again';
pass('a reload with an interval starts sampling again');

# --- the sampler terminated: it comes back and takes up the open episode
$holder->query_safe('BEGIN');
$holder->query_safe('SELECT pg_advisory_xact_lock(8)');
send_and_wait_for_lock($waiter, 'waiter', 'SELECT pg_advisory_xact_lock(8);');
my $hpid = pid_of('holder');
$node->poll_query_until('postgres', "SELECT count(*) = 1 FROM concurrency.lock_history WHERE root_pid = $hpid AND ended_at IS NULL")
  or die 'no open episode';
my $episode = $node->safe_psql('postgres', "SELECT episode_id FROM concurrency.lock_history WHERE root_pid = $hpid AND ended_at IS NULL");
my $sampler = $node->safe_psql('postgres', 'SELECT sampler_pid FROM concurrency.lock_history_status()');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($sampler)");
$node->poll_query_until('postgres',
	"SELECT sampler_pid IS NOT NULL AND sampler_pid <> $sampler FROM concurrency.lock_history_status()")
  or die 'the sampler did not come back';
$holder->query_safe('COMMIT');
$node->poll_query_until('postgres', "SELECT ended_by = 'released' FROM concurrency.lock_history WHERE episode_id = $episode")
  or die 'the episode did not end';
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FILTER (WHERE episode_id = $episode AND ended_by = 'released'), count(*) FILTER (WHERE episode_id > $episode) FROM concurrency.lock_history"
	),
	'1|0',
	'a terminated sampler comes back and ends the episode it left open (the same episode, no new one)');
$waiter->query('SELECT 1');

# --- the sampler killed: the postmaster restarts everything, the sampler comes back
$sampler = $node->safe_psql('postgres', 'SELECT sampler_pid FROM concurrency.lock_history_status()');
$_->quit for ($waiter, $holder, $alter, $s1, $s2, @readers);
my $started = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
kill 'KILL', $sampler;
$node->poll_query_until('postgres', "SELECT sampler_pid IS NOT NULL AND sampler_pid <> $sampler FROM concurrency.lock_history_status()")
  or die 'the sampler did not come back after a crash';
like(slurp_file($node->logfile), qr/background worker "concurrency_ext background" \(PID $sampler\) was terminated by signal 9/,
	'SIGKILL of the sampler is a crash: the postmaster reinitializes');
is($node->safe_psql('postgres', 'SELECT count(*) FROM concurrency.lock_history'), '0', 'history lives in memory: a crash clears it');
is($node->safe_psql('postgres', "SELECT pg_postmaster_start_time() = '$started'"), 't', 'the postmaster itself stayed up');
ok($node->safe_psql('postgres', 'SELECT samples > 0 FROM concurrency.lock_history_status()') eq 't', 'the new sampler samples');

# --- history_size out of range in the file: as for any extension's setting,
# the server warns and keeps the default
$node->stop;
$node->append_conf('postgresql.conf', "concurrency.history_size = 0\n");
$node->start;
like(slurp_file($node->logfile), qr/WARNING:  0 is outside the valid range for parameter "concurrency.history_size" \(1 \.\. 100000\)/,
	'history_size = 0: the usual out-of-range message');
is($node->safe_psql('postgres', 'SELECT history_size FROM concurrency.lock_history_status()'), '1000',
	'and the default size');
$node->stop;

done_testing();
