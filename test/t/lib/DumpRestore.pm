# The dump-and-restore step of the TAP dump tests (test/t/*_dump.pl): dumps
# the database postgres of one node in one format and restores it into a new
# database of a node (the same or another), as the tests' checks.
package DumpRestore;
use strict;
use warnings;
use Exporter 'import';
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(dump_and_restore);

# dump_and_restore($source, $target, $format, $db): pg_dump --format=$format
# (custom or plain) of $source's database postgres, restored into the new
# database $db of $target by pg_restore or psql, stopping at the first error.
sub dump_and_restore
{
	my ($source, $target, $format, $db) = @_;
	my $file = PostgreSQL::Test::Utils::tempdir . "/dump.$format";
	$source->command_ok([ 'pg_dump', '-d', $source->connstr('postgres'), "--format=$format", '-f', $file ],
		"pg_dump --format=$format");
	$target->safe_psql('postgres', "CREATE DATABASE $db");
	my @restore = $format eq 'custom'
	  ? ('pg_restore', '--exit-on-error', '-d', $target->connstr($db), $file)
	  : ('psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $target->connstr($db), '-f', $file);
	$target->command_ok(\@restore, "$restore[0] restores the $format dump into $db");
	return;
}

1;
