# The extension loads in a fresh cluster, survives an immediate restart, and
# a backend crash elsewhere does not take it down with it; CREATE EXTENSION
# in two databases at once succeeds in both, and in eight at once in all.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->start;

$node->safe_psql('postgres', 'CREATE EXTENSION concurrency_ext');
my $version = $node->safe_psql('postgres', 'SELECT concurrency.version()');
my $extversion = $node->safe_psql('postgres',
	"SELECT extversion FROM pg_extension WHERE extname = 'concurrency_ext'");
is($version, $extversion, 'module version matches the installed extension version');

$node->stop('immediate');
$node->start;
is($node->safe_psql('postgres', 'SELECT concurrency.version()'),
	$version, 'works after an immediate shutdown and crash recovery');

$node->safe_psql('postgres', 'DROP EXTENSION concurrency_ext');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_namespace WHERE nspname = 'concurrency'"),
	'0', 'DROP EXTENSION leaves no schema behind');

# CREATE EXTENSION in two databases at once: the second waits for the
# first's cluster-wide role (concurrency_monitor) and then finds it, instead
# of failing on the unique index of role names
$node->safe_psql('postgres', 'DROP ROLE concurrency_monitor');
$node->safe_psql('postgres', "CREATE DATABASE db_$_") for (1, 2);
my $first = $node->background_psql('db_1');
$first->query_safe('BEGIN');
$first->query_safe('CREATE EXTENSION concurrency_ext');
my $second = $node->background_psql('db_2', on_error_stop => 0);
$second->query_safe("SET application_name = 'second_create'");
$second->{stdin} .= "BEGIN; CREATE EXTENSION concurrency_ext; COMMIT; SELECT 'second done';\n";
$second->{run}->pump_nb;
$node->poll_query_until('postgres',
	q(SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'second_create' AND wait_event_type = 'Lock'))
  or die 'the second CREATE EXTENSION does not wait for the first';
$first->query_safe('COMMIT');
$first->quit;
$second->{timeout}->start($PostgreSQL::Test::Utils::timeout_default) if $second->{timeout};
$second->{run}->pump until $second->{stdout} =~ /second done/ || $second->{stderr} =~ /ERROR/;
unlike($second->{stderr}, qr/ERROR/, 'CREATE EXTENSION in two databases at once: both succeed');
$second->quit;
is($node->safe_psql('db_2', "SELECT count(*) FROM pg_extension WHERE extname = 'concurrency_ext'"), '1',
	'the second database has the extension');

# Eight at once: the first holds the role's creation; the seven others wait
# for it, then each finds the role and goes on.
$node->safe_psql('postgres', 'DROP ROLE concurrency_monitor');
$node->safe_psql('postgres', "CREATE DATABASE many_$_") for (1 .. 8);
my @sessions = map { $node->background_psql("many_$_", on_error_stop => 0) } (1 .. 8);
$_->query_safe("SET application_name = 'many_create'") for @sessions;
$sessions[0]->query_safe('BEGIN');
$sessions[0]->query_safe('CREATE EXTENSION concurrency_ext');
for my $s (@sessions[1 .. 7]) {
	$s->{stdin} .= "BEGIN; CREATE EXTENSION concurrency_ext; COMMIT; SELECT 'created';\n";
	$s->{run}->pump_nb;
}
$node->poll_query_until('postgres',
	q(SELECT count(*) = 7 FROM pg_stat_activity WHERE application_name = 'many_create' AND wait_event_type = 'Lock'))
  or die 'the seven other CREATE EXTENSION do not wait for the first';
$sessions[0]->query_safe('COMMIT');
for my $s (@sessions[1 .. 7]) {
	$s->{timeout}->start($PostgreSQL::Test::Utils::timeout_default) if $s->{timeout};
	$s->{run}->pump until $s->{stdout} =~ /created/ || $s->{stderr} =~ /ERROR/;
}
is(join('', map { $_->{stderr} =~ /ERROR/ ? 'E' : '.' } @sessions[1 .. 7]), '.......',
	'CREATE EXTENSION in eight databases at once: all succeed');
$_->quit for @sessions;
is(join(',', map { $node->safe_psql("many_$_", "SELECT count(*) FROM pg_extension WHERE extname = 'concurrency_ext'") } (1 .. 8)),
	'1,1,1,1,1,1,1,1', 'each of the eight databases has the extension');

$node->stop;
done_testing();
