# examples/monitoring/queries.yaml with a real postgres_exporter (Debian's
# prometheus-postgres-exporter): the exporter is started against a cluster
# with a queue, a lock wait and keyed tasks, and the concurrency_* metrics
# appear in its /metrics output with the values the views hold.
# Skipped when the exporter is not installed.
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

my $http_port = PostgreSQL::Test::Cluster::get_free_port();
my $host = $node->host;
my $port = $node->port;
local $ENV{DATA_SOURCE_NAME} = "host=$host port=$port user=$user dbname=postgres sslmode=disable";
my ($eout, $eerr);
my $exp = IPC::Run::start(
	[ $exporter, "--extend.query-path=$queries", "--web.listen-address=127.0.0.1:$http_port" ],
	'>', \$eout, '2>', \$eerr);
END { $exp->kill_kill if $exp; }

my $metrics = '';
my $http = HTTP::Tiny->new(timeout => 10);
for (1 .. 100)
{
	my $response = $http->get("http://127.0.0.1:$http_port/metrics");
	if ($response->{success} && $response->{content} =~ /^concurrency_lock_tree_root_blockers/m)
	{
		$metrics = $response->{content};
		last;
	}
	usleep(200_000);
}
ok($metrics ne '', 'the exporter serves /metrics with concurrency_* series') or diag($eerr);

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
is(value('concurrency_queue_ready', 'queue="empty"'), '0', 'an empty queue has its series too');
ok(defined value('concurrency_queue_oldest_ready_age_seconds', 'queue="emails"'), 'queue lag (oldest ready age)');
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

$holder->query_safe('COMMIT');
$waiter->query_safe('COMMIT');
$holder->quit;
$waiter->quit;
$exp->kill_kill;
undef $exp;
done_testing();
