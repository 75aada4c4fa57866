# Behind a real pooler: PgBouncer (Debian's package) in pool_mode = transaction
# in front of a cluster, as docs/operations.md describes it.
#  - xact_lock works through it and excludes a direct session;
#  - session_lock on an xact_only subsystem is refused;
#  - a session lock left on a pooled server connection shows in held_locks
#    as suspect_leak while that connection sits idle in the pool, and reads
#    false while the connection serves another client's transaction (the
#    documented blind spot);
#  - the queue's enqueue, dequeue, heartbeat and complete work across pooled
#    transactions, and examples/worker.py (the Python runtime, which prepares
#    no statement on the server and does not LISTEN) drains a queue through it;
#  - a counter's adds are part of the caller's pooled transaction;
#  - LISTEN does not work through it: the client that listened never gets
#    the notification (a direct listener does).
# Skipped when pgbouncer is not installed.
use strict;
use warnings;
use IPC::Run;
use Time::HiRes qw(usleep);
use File::Basename qw(dirname);
use Cwd qw(abs_path);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $pgbouncer = (grep { -x $_ } '/usr/sbin/pgbouncer', '/usr/bin/pgbouncer')[0];
plan skip_all => 'pgbouncer is not installed (apt-get install pgbouncer)' unless $pgbouncer;

my $node = PostgreSQL::Test::Cluster->new('pooled');
$node->init;
$node->start;
my $user = $node->safe_psql('postgres', 'SELECT current_user');
$node->safe_psql('postgres', q{
  CREATE EXTENSION concurrency_ext;
  SELECT concurrency.register_subsystem('report', 1001, 'nightly report');
  SELECT concurrency.register_subsystem('relay', 1002, 'outbox relay', xact_only => true);
  SELECT concurrency.create_queue('emails', lease => '30 seconds');
});

# PgBouncer on a Unix socket in a private directory: database "one" has a
# single server connection (so which client lands on it is known), "four" has
# four (for the worker, which uses more than one connection).
my $dir = PostgreSQL::Test::Utils::tempdir_short();
my $bport = PostgreSQL::Test::Cluster::get_free_port();
my ($host, $port) = ($node->host, $node->port);
append_to_file("$dir/userlist.txt", qq{"$user" ""\n});
append_to_file("$dir/pgbouncer.ini", <<"INI");
[databases]
one = host=$host port=$port dbname=postgres pool_size=1
four = host=$host port=$port dbname=postgres pool_size=4
[pgbouncer]
unix_socket_dir = $dir
listen_port = $bport
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
max_client_conn = 50
ignore_startup_parameters = extra_float_digits,options
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
my $bouncer = IPC::Run::start([ $pgbouncer, "$dir/pgbouncer.ini" ], '>', "$dir/stdout", '2>', "$dir/stderr");
END { $bouncer->kill_kill if $bouncer; }
my $one  = "host=$dir port=$bport dbname=one user=$user";
my $four = "host=$dir port=$bport dbname=four user=$user";

# psql through the pooler (psql takes the last -d)
sub pooled
{
	my ($conninfo, $sql) = @_;
	my ($out, $err);
	my $rc = $node->psql('postgres', $sql, stdout => \$out, stderr => \$err,
		extra_params => [ '-d', $conninfo, '-v', 'VERBOSITY=verbose' ]);
	return ($rc, $out, $err);
}
my $up = 0;
for (1 .. 100)
{
	# until its socket is there, psql fails before reading its input, and
	# the write to its closed stdin dies in IPC::Run: wait for the socket,
	# and take such a death as one more failed try
	if (-S "$dir/.s.PGSQL.$bport")
	{
		my ($rc) = eval { pooled($one, 'SELECT 1') };
		if (defined $rc && $rc == 0) { $up = 1; last; }
	}
	usleep(100_000);
}
ok($up, 'pgbouncer accepts connections') or BAIL_OUT(slurp_file("$dir/pgbouncer.log"));
my $session = sub { $node->background_psql('postgres', extra_params => [ '-d', $_[0] ]) };

# --- transaction-level locks work -----------------------------------------------
my $a = $session->($one);
$a->query_safe(q{BEGIN; SELECT concurrency.xact_lock('report')});
is($node->safe_psql('postgres', q{SELECT concurrency.try_xact_lock('report')}),
	'f', 'xact_lock through the pooler excludes a direct session');
$a->query_safe('COMMIT');
is($node->safe_psql('postgres', q{SELECT concurrency.try_xact_lock('report')}),
	't', 'and is released at its COMMIT');
$a->quit;

# --- session locks on an xact_only subsystem are refused -----------------------
my ($rc, $out, $err) = pooled($one, q{SELECT concurrency.session_lock('relay')});
isnt($rc, 0, 'session_lock on an xact_only subsystem fails through the pooler');
like($err, qr/42501/, '... with SQLSTATE 42501');
is($node->safe_psql('postgres', q{SELECT count(*) FROM concurrency.held_locks}),
	'0', '... and leaves no lock behind');

# --- a leaked session lock is a suspect_leak --------------------------------------
($rc, $out, $err) = pooled($one, q{SELECT concurrency.session_lock('report')});
is($rc, 0, 'session_lock on a plain subsystem is taken through the pooler');
is($node->safe_psql('postgres',
		q{SELECT format('%s %s %s', subsystem, state, suspect_leak) FROM concurrency.held_locks}),
	'report idle t', 'the lock left on the pooled server connection shows as suspect_leak');
# another client's transaction on that same server connection: the lock is
# still leaked, but the holder is not idle now, so it reads false
my $b = $session->($one);
$b->query_safe('BEGIN; SELECT 1');
is($node->safe_psql('postgres',
		q{SELECT format('%s %s %s', subsystem, state, suspect_leak) FROM concurrency.held_locks}),
	'report idle in transaction f',
	'while the connection serves another client it reads false (documented)');
$b->query_safe('COMMIT');
$b->quit;
($rc, $out, $err) = pooled($one, q{SELECT concurrency.session_unlock('report')});
is($out, 't', 'with one server connection, the unlock happens to land on the holder');
is($node->safe_psql('postgres', q{SELECT count(*) FROM concurrency.held_locks}),
	'0', 'no named lock is left');

# --- the queue across pooled transactions ----------------------------------------
($rc, $out, $err) = pooled($four,
	q{SELECT count(*) FROM concurrency.enqueue_batch('emails', ARRAY['{"n":1}','{"n":2}','{"n":3}']::jsonb[])});
is($out, '3', 'enqueue_batch through the pooler');
my $done = 0;
for (1 .. 3)
{
	# claim in one transaction, heartbeat and complete in later ones, each
	# possibly on another server connection
	my (undef, $claim) = pooled($four,
		q{SELECT task_id || ' ' || lease_token FROM concurrency.dequeue('emails')});
	my ($id, $token) = split ' ', $claim;
	my ($rc1) = pooled($four, "SELECT concurrency.heartbeat('emails', $id, $token)");
	my ($rc2) = pooled($four, "SELECT concurrency.complete('emails', $id, $token)");
	$done++ if $rc1 == 0 && $rc2 == 0;
}
is($done, 3, 'dequeue, heartbeat and complete work in separate pooled transactions');
is($node->safe_psql('postgres',
		q{SELECT ready + leased + dead FROM concurrency.queue_stats WHERE queue = 'emails'}),
	'0', 'every task is done');

# --- a counter through the pooler: part of the caller's pooled transaction ---
$node->safe_psql('postgres', q{
  SELECT concurrency.create_counter('pooled_stock', slots => 4, min_value => 0);
  CREATE TABLE pooled_orders (units integer NOT NULL);
});
($rc, $out, $err) = pooled($four, q{SELECT concurrency.counter_add('pooled_stock', 10)});
is($rc, 0, 'counter_add through the pooler') or diag($err);
($rc, $out, $err) = pooled($four, q{BEGIN; INSERT INTO pooled_orders VALUES (3);
  SELECT concurrency.counter_add('pooled_stock', -3); ROLLBACK;});
($rc, $out, $err) = pooled($four, q{BEGIN; INSERT INTO pooled_orders VALUES (4);
  SELECT concurrency.counter_add('pooled_stock', -4); COMMIT;});
($rc, $out, $err) = pooled($four, q{SELECT concurrency.counter_add('pooled_stock', -7)});
like($err, qr/23514/, 'a withdrawal past the bound is refused through the pooler (23514)');
is($node->safe_psql('postgres', q{SELECT concurrency.counter_value('pooled_stock') || ' ' || (SELECT sum(units) FROM pooled_orders)}),
	'6 4', 'the rolled-back order took nothing, the committed one took its units with it');

# --- examples/worker.py through the pooler -----------------------------------------
SKIP:
{
	my $python = -x '/usr/bin/python3' ? '/usr/bin/python3' : 'python3';
	skip 'python3-psycopg is missing', 2 if system($python, '-c', 'import psycopg') != 0;
	my $worker = abs_path(dirname(__FILE__) . '/../../examples/worker.py');
	$node->safe_psql('postgres', slurp_file(abs_path(dirname(__FILE__) . '/../../examples/worker_setup.sql')));
	$node->safe_psql('postgres',
		q{SELECT count(*) FROM concurrency.enqueue_batch('emails',
		    (SELECT array_agg(jsonb_build_object('n', i)) FROM generate_series(1, 20) i))});
	my ($wout, $werr);
	my $ok = IPC::Run::run(
		[ $python, $worker, '--queue', 'emails', '--name', 'pooled', '--drain', '--poll', '0.2',
		  '--conninfo', $four ],
		'>', \$wout, '2>', \$werr, IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	ok($ok, 'worker.py drains the queue through the pooler') or diag("$wout\n$werr");
	is($node->safe_psql('postgres',
			q{SELECT count(DISTINCT task_id) || ' ' || count(*) FROM worker_results WHERE worker = 'pooled'}),
		'20 20', 'every task done once');
}

# --- LISTEN does not work through transaction pooling ---------------------------------
# The server connection that ran LISTEN goes back to the pool: the notification
# reaches that connection while it is idle there or serves someone else, never
# the client that listened. A direct listener, for comparison, gets it.
my $direct = $node->background_psql('postgres');
$direct->query_safe('LISTEN concurrency_emails');
my $listener = $session->($one);
$listener->query_safe('LISTEN concurrency_emails');
$node->safe_psql('postgres', q{SELECT concurrency.enqueue('emails', '{"listen": 1}')});
my $heard_direct = '';
for (1 .. 50)
{
	$heard_direct .= $direct->query_safe('SELECT 1');
	last if $heard_direct =~ /Asynchronous notification/;
	usleep(100_000);
}
like($heard_direct, qr/Asynchronous notification "concurrency_emails"/,
	'a direct connection that ran LISTEN gets the notification');
my $heard = '';
$heard .= $listener->query_safe('SELECT 1') for 1 .. 3;
($rc, $out, $err) = pooled($one, 'SELECT 1');
$heard .= $listener->query_safe('SELECT 1');
unlike($heard, qr/Asynchronous notification/, 'a client that ran LISTEN through the pooler never gets it');
$listener->quit;
$direct->quit;

$bouncer->kill_kill;
undef $bouncer;
done_testing();
