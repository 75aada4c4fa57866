# examples/monitoring/queries.yaml with a real postgres_exporter (Debian's
# prometheus-postgres-exporter): the exporter is started against a cluster
# with queues, a lock wait and keyed tasks, as docs/operations.md says to run
# it (a role with pg_monitor and concurrency_monitor, nothing else), and the
# concurrency_* metrics appear in its /metrics output with the values the
# views hold, for a queue created after the grant too. Started again as a
# role that may read one queue only, it leaves the other queues out and still
# serves every other series. Skipped when the exporter is not installed.
use strict;
use warnings;
use IPC::Run;
use Time::HiRes qw(usleep);
use HTTP::Tiny;
use File::Basename qw(dirname);
use Cwd qw(abs_path);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $exporter = (grep { -x $_ } '/usr/bin/prometheus-postgres-exporter', '/usr/bin/postgres_exporter')[0];
plan skip_all => 'postgres_exporter is not installed (apt-get install prometheus-postgres-exporter)'
  unless $exporter;
my $queries = abs_path(dirname(__FILE__) . '/../../examples/monitoring/queries.yaml');

my $node = PostgreSQL::Test::Cluster->new('monitored');
$node->init;
# lock history needs the preload (harmless where the module has no worker)
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'concurrency_ext'
concurrency.history_interval = '50ms'
});
$node->start;
my $user = $node->safe_psql('postgres', 'SELECT current_user');
$node->safe_psql('postgres', q{
  CREATE EXTENSION concurrency_ext;
  SELECT concurrency.register_subsystem('report', 1001);
  SELECT concurrency.create_queue('emails');
  SELECT concurrency.enqueue('emails', '{}') FROM generate_series(1, 3);
  SELECT concurrency.enqueue('emails', '{}', run_at => now() + interval '1 hour');
  SELECT concurrency.create_queue('empty');
  CREATE ROLE exporter LOGIN;
  GRANT pg_monitor TO exporter;
  GRANT concurrency_monitor TO exporter;
  CREATE ROLE partial_exporter LOGIN;
  GRANT pg_monitor TO partial_exporter;
  SELECT concurrency.grant_queue('emails', 'partial_exporter', '{read}');
  -- created after the grant: concurrency_monitor reads it too
  SELECT concurrency.create_queue('later', key_limit => 1);
  SELECT concurrency.enqueue('later', '{}', concurrency_key => 'k1') FROM generate_series(1, 3);
  SELECT concurrency.enqueue('later', '{}', concurrency_key => 'k2');
});
my $has_keys = $node->safe_psql('postgres',
	q{SELECT to_regprocedure('concurrency.queue_keys(text)') IS NOT NULL}) eq 't';
my $has_history = $node->safe_psql('postgres',
	q{SELECT to_regclass('concurrency.lock_history') IS NOT NULL}) eq 't';

# a wait: the holder keeps the named lock, the waiter queues for it
my $holder = $node->background_psql('postgres');
$holder->query_safe(q{BEGIN; SELECT concurrency.xact_lock('report')});
my $waiter = $node->background_psql('postgres');
$waiter->query_until(qr/waiting/, "\\echo waiting\nBEGIN; SELECT concurrency.xact_lock('report');\n");
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM concurrency.lock_waits})
  or die 'the waiter does not wait';

# Starts the exporter as a role and returns its first /metrics page that has
# the concurrency_* series, and its log (and stops it again).
sub scrape
{
	my ($role) = @_;
	my $http_port = PostgreSQL::Test::Cluster::get_free_port();
	my $host = $node->host;
	my $port = $node->port;
	local $ENV{DATA_SOURCE_NAME} = "host=$host port=$port user=$role dbname=postgres sslmode=disable";
	my ($eout, $eerr) = ('', '');
	my $exp = IPC::Run::start(
		[ $exporter, "--extend.query-path=$queries", "--web.listen-address=127.0.0.1:$http_port" ],
		'>', \$eout, '2>', \$eerr);
	my $page = '';
	my $http = HTTP::Tiny->new(timeout => 10);
	for (1 .. 100)
	{
		my $response = $http->get("http://127.0.0.1:$http_port/metrics");
		if ($response->{success} && $response->{content} =~ /^concurrency_lock_tree_root_blockers/m)
		{
			$page = $response->{content};
			last;
		}
		usleep(200_000);
	}
	$exp->kill_kill;
	diag($eerr) if $page eq '';
	return ($page, $eerr);
}

my ($metrics, $errors) = scrape('exporter');
ok($metrics ne '', 'the exporter, as a role with pg_monitor and concurrency_monitor, serves the concurrency_* series');

# the value of one series: name{labels...} value
sub value
{
	my ($name, $labels) = @_;
	$labels //= '';
	for my $line (split /\n/, $metrics)
	{
		next unless $line =~ /^\Q$name\E(\{[^}]*\})?\s+(\S+)$/;
		my ($l, $v) = ($1 // '', $2);
		return $v if $labels eq '' || index($l, $labels) >= 0;
	}
	return undef;
}

is(value('concurrency_queue_ready', 'queue="emails"'), '3', 'queue_stats: ready tasks per queue');
is(value('concurrency_queue_scheduled', 'queue="emails"'), '1', 'queue_stats: scheduled tasks');
is(value('concurrency_queue_claimable', 'queue="emails"'), '3',
	'claimable (the KEDA figure): the ready tasks, not the one scheduled for later');
is(value('concurrency_queue_ready', 'queue="empty"'), '0', 'an empty queue has its series too');
is(value('concurrency_queue_oldest_ready_age_seconds', 'queue="empty"'), '0', 'no ready task: lag 0');
my $lag = value('concurrency_queue_oldest_ready_age_seconds', 'queue="emails"');
ok(defined $lag && $lag > 0, 'queue lag (oldest ready age) of a queue with ready tasks');
is(value('concurrency_queue_ready', 'queue="later"'), '2', 'a queue created after the grant is read too (one ready per key)');
is(value('concurrency_queue_keys_keys', 'queue="later"'), '2', 'queue_keys: keys with live tasks');
is(value('concurrency_queue_keys_keys_waiting', 'queue="later"'), '2',
	'keys_waiting counts keys with tasks waiting to run, ready ones included (as its description says)');
is(value('concurrency_queue_keys_max_waiting_per_key', 'queue="later"'), '3', 'the most tasks waiting under one key');
is(value('concurrency_lock_waits_waiting_sessions'), '1', 'lock_waits: the waiting session');
is(value('concurrency_lock_tree_root_blockers'), '1', 'lock_tree: its root blocker');
is(value('concurrency_lock_tree_largest_tree'), '1', 'lock_tree: sessions blocked by the root');
SKIP:
{
	skip 'concurrency.queue_keys is not in this version', 1 unless $has_keys;
	ok(defined value('concurrency_queue_keys_keys', 'queue="emails"'), 'queue_keys: keys per queue');
}
SKIP:
{
	skip 'concurrency.lock_history is not in this version', 1 unless $has_history;
	my $open = value('concurrency_lock_history_open_episodes');
	ok(defined $open && $open >= 1, 'lock_history: the wait going on is an open episode');
}

# every description says what its query counts: the one fixed for keys_waiting
like($metrics, qr/^# HELP concurrency_queue_keys_keys_waiting concurrency keys with tasks waiting to run \(ready, scheduled, or blocked behind key_limit\)/m,
	'keys_waiting is described as what it counts');

# a role that may read one queue only: the others are left out, nothing fails
($metrics, $errors) = scrape('partial_exporter');
ok($metrics ne '', 'the exporter as a role with read on one queue serves its series');
is(value('concurrency_queue_ready', 'queue="emails"'), '3', 'the readable queue is there');
ok(!defined value('concurrency_queue_ready', 'queue="empty"'), 'a queue it may not read is left out, not NaN');
ok(!defined value('concurrency_queue_oldest_ready_age_seconds', 'queue="later"'), 'and has no lag series (not 0)');
ok(defined value('concurrency_queue_keys_keys', 'queue="emails"'),
	'queue_keys over the readable queue is scraped: the unreadable ones do not fail the query');
unlike($errors, qr/lacks permission/, 'no query of the scrape failed on a permission');
is(value('concurrency_lock_tree_root_blockers'), '1', 'the lock series are there as well');

$holder->query_safe('COMMIT');
$waiter->query_safe('COMMIT');
$holder->quit;
$waiter->quit;
done_testing();
