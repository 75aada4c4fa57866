# Named locks across processes and servers:
#  - a session lock goes with its backend: freed when the backend is
#    terminated, when its client vanishes, and by a crash restart;
#  - the registry (names, keys, slots, flags) survives pg_dump / pg_restore,
#    in custom and plain format, and the restored names lock the same keys;
#  - on a hot standby, taking a named lock is refused (it would exclude
#    nobody on the primary), while the views still work.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('primary');
$node->init(allows_streaming => 1);
# the crash test below needs the postmaster to restart the backends
$node->append_conf('postgresql.conf', 'restart_after_crash = on');
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION concurrency_ext');
$node->safe_psql('postgres', q{
	SELECT concurrency.register_subsystem('relay', 1001, 'outbox relay');
	SELECT concurrency.register_subsystem('booking', -5, 'one room at a time', xact_only => true);
	SELECT concurrency.register_subsystem('report', 9223372036854775807);
	SELECT concurrency.unregister_subsystem('report');
	SELECT concurrency.register_subsystem('migrator', 7);
});

# --- a session lock is freed with its backend --------------------------------

sub try_relay
{
	return $node->safe_psql('postgres', q{
		SELECT concurrency.try_session_lock('relay') AND concurrency.session_unlock('relay')});
}

my $holder = $node->background_psql('postgres');
my $holder_pid = $holder->query_safe(
	q{SELECT concurrency.session_lock('relay'); SELECT pg_backend_pid()});
$holder_pid =~ s/\D//g;
is(try_relay(), 'f', 'a session lock excludes other sessions');
is($node->safe_psql('postgres',
		q{SELECT format('%s %s %s', subsystem, state, suspect_leak) FROM concurrency.held_locks}),
	'relay idle t', 'held_locks shows it held by an idle session, suspected leak');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($holder_pid)");
$node->poll_query_until('postgres',
	"SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $holder_pid)")
  or die 'terminated backend did not go away';
is(try_relay(), 't', 'terminating the holder backend frees its session lock');
eval { $holder->quit };

# the client disappears without unlocking (a crashed worker)
$holder = $node->background_psql('postgres');
$holder_pid = $holder->query_safe(
	q{SELECT concurrency.session_lock('relay'); SELECT concurrency.session_lock('relay', 42); SELECT pg_backend_pid()});
$holder_pid =~ s/\D//g;
is(try_relay(), 'f', 'held again by a new session');
$holder->quit;
$node->poll_query_until('postgres',
	"SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $holder_pid)")
  or die 'disconnected backend did not go away';
is(try_relay(), 't', 'a vanished client frees its session locks');
is($node->safe_psql('postgres', 'SELECT count(*) FROM concurrency.held_locks'),
	'0', 'no named lock left behind');

# a crash of another backend restarts the server: every lock is gone, the
# registry is intact
$holder = $node->background_psql('postgres', on_error_stop => 0);
$holder->query_safe(q{SELECT concurrency.session_lock('migrator')});
my $victim = $node->background_psql('postgres', on_error_stop => 0);
my $victim_pid = $victim->query_safe('SELECT pg_backend_pid()');
$victim_pid =~ s/\D//g;
kill 'KILL', $victim_pid;
$node->poll_query_until('postgres', 'SELECT 1', '1')
  or die 'server did not come back after the crash';
eval { $holder->quit };
eval { $victim->quit };
is($node->safe_psql('postgres',
		q{SELECT concurrency.try_session_lock('migrator') AND concurrency.session_unlock('migrator')}),
	't', 'after crash recovery the lock is free');
is($node->safe_psql('postgres', 'SELECT count(*) FROM concurrency.subsystem'),
	'3', 'and the registry is intact');

# --- the registry survives pg_dump / pg_restore -----------------------------

my $registry_query = q{
	SELECT string_agg(format('%s|%s|%s|%s|%s|%s|%s', name, key, slot, description, xact_only,
	                         registered_at, registered_by), E'\n' ORDER BY name)
	  FROM concurrency.subsystem};
my $registry_before = $node->safe_psql('postgres', $registry_query);
my $tempdir = PostgreSQL::Test::Utils::tempdir;

$node->command_ok([ 'pg_dump', '-Fc', '-f', "$tempdir/custom.dump", '-d', $node->connstr('postgres') ],
	'pg_dump in custom format');
$node->safe_psql('postgres', 'CREATE DATABASE restored_custom');
$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', $node->connstr('restored_custom'), "$tempdir/custom.dump" ],
	'pg_restore without errors');
is($node->safe_psql('restored_custom', $registry_query),
	$registry_before, 'pg_restore brings back every row: names, keys, slots, descriptions, flags, stamps');

$node->command_ok([ 'pg_dump', '-Fp', '-f', "$tempdir/plain.sql", '-d', $node->connstr('postgres') ],
	'pg_dump in plain format');
$node->safe_psql('postgres', 'CREATE DATABASE restored_plain');
$node->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-f', "$tempdir/plain.sql",
		'-d', $node->connstr('restored_plain') ], 'plain dump restores with psql');
is($node->safe_psql('restored_plain', $registry_query), $registry_before, 'plain format keeps the rows too');

# the restored names lock the same keys, and the restored flags are enforced
is($node->safe_psql('restored_custom', q{
	BEGIN;
	DO $$BEGIN PERFORM concurrency.xact_lock('booking', 3); PERFORM concurrency.xact_lock('relay'); END$$;
	SELECT string_agg(subsystem || ':' || coalesce(resource::text, '-'), ',' ORDER BY subsystem)
	  FROM concurrency.held_locks WHERE pid = pg_backend_pid();
	COMMIT;}), 'booking:3,relay:-', 'restored names lock and show in held_locks');
is($node->safe_psql('restored_custom', q{
	BEGIN;
	DO $$BEGIN PERFORM concurrency.xact_lock('relay'); END$$;
	SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
	COMMIT;}), '1001', 'the restored name locks its original key');
my ($rc, $out, $err) = $node->psql('restored_custom', q{SELECT concurrency.session_lock('booking')});
like($err, qr/allows transaction-level locks only/, 'xact_only survives the restore');
# a restored database keeps accepting registrations (the trigger is there)
$node->safe_psql('restored_custom', q{SELECT concurrency.register_subsystem('new_after_restore', 99)});
is($node->safe_psql('restored_custom',
		q{SELECT slot FROM concurrency.subsystem WHERE name = 'new_after_restore'}),
	$node->safe_psql('restored_custom',
		q{SELECT min(s) FROM generate_series(16, 100) s WHERE s NOT IN (SELECT slot FROM concurrency.subsystem WHERE name <> 'new_after_restore')}),
	'registration after a restore takes the lowest free slot');

# --- hot standby ------------------------------------------------------------

$node->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'backup', has_streaming => 1);
$standby->start;
$node->safe_psql('postgres', q{SELECT concurrency.register_subsystem('late', 77)});
$node->wait_for_catchup($standby);

is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'standby is in recovery');
is($standby->safe_psql('postgres', q{SELECT name FROM concurrency.subsystem WHERE name = 'late'}),
	'late', 'the registry replicates');
($rc, $out, $err) = $standby->psql('postgres', q{SELECT concurrency.xact_lock('relay')});
like($err, qr/cannot take named lock "relay" during recovery/, 'xact_lock refused on a standby');
($rc, $out, $err) = $standby->psql('postgres', q{SELECT concurrency.try_session_lock('relay', 5)});
like($err, qr/during recovery/, 'try_session_lock refused on a standby');
($rc, $out, $err) = $standby->psql('postgres',
	q{\set VERBOSITY verbose
	  SELECT concurrency.xact_lock(ARRAY['relay', 'late'])});
like($err, qr/25006/, 'the refusal is SQLSTATE 25006');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM concurrency.held_locks'),
	'0', 'held_locks works on a standby');
($rc, $out, $err) = $standby->psql('postgres', q{SELECT concurrency.xact_lock('no_such_name')});
like($err, qr/is not registered/, 'unknown names are still reported as such');

$standby->stop;
$node->stop;
done_testing();
