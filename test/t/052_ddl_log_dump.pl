# The run_ddl log (concurrency.ddl_log) is user data: pg_dump / pg_restore
# keep its rows (extension configuration, pg_extension_config_dump) and the
# position of its id sequence, so that runs after a restore continue the ids
# instead of failing on the restored ones. Each role still reads only its own
# rows after the restore.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use DumpRestore;

my $node = PostgreSQL::Test::Cluster->new('ddl_log_dump');
$node->init;
$node->start;

$node->safe_psql('postgres', q{
  CREATE EXTENSION concurrency_ext;
  CREATE ROLE migrator;
  CREATE TABLE accounts (id int);
  ALTER TABLE accounts OWNER TO migrator;
  CALL concurrency.run_ddl('ALTER TABLE accounts ADD COLUMN balance int');
  SET ROLE migrator;
  CALL concurrency.run_ddl('ALTER TABLE accounts ADD COLUMN opened date');
  RESET ROLE;
});
my ($ret) = $node->psql('postgres', q{CALL concurrency.run_ddl('ALTER TABLE missing ADD COLUMN x int')});
isnt($ret, 0, 'a run whose statement fails raises its error');

my $log_sql = q{
  SELECT string_agg(format('%s|%s|%s|%s|%s|%s|%s|%s|%s', id, run_by, statements, started, finished, attempts,
                           outcome, error IS NOT NULL, blockers_terminated), E'\n' ORDER BY id)
    FROM concurrency.ddl_log};
my $own_sql = q{SET ROLE migrator; SELECT string_agg(statements, ',' ORDER BY id) FROM concurrency.ddl_log};
my $before = $node->safe_psql('postgres', $log_sql);
is(scalar(() = $before =~ /\n/g) + 1, 3, 'before: three runs logged');
like($before, qr/\|failed\|t\|/, 'before: the failed run is logged with its error');
is($node->safe_psql('postgres', $own_sql), 'ALTER TABLE accounts ADD COLUMN opened date',
	'before: migrator reads its own row only');
my $last_id = $node->safe_psql('postgres', q{SELECT max(id) FROM concurrency.ddl_log});

for my $format ('custom', 'plain')
{
	my $db = "restored_$format";
	dump_and_restore($node, $node, $format, $db);
	is($node->safe_psql($db, $log_sql), $before, "$format: every logged run came back as it was");
	is($node->safe_psql($db, $own_sql), 'ALTER TABLE accounts ADD COLUMN opened date',
		"$format: migrator still reads its own row only");
	$node->safe_psql($db, q{CALL concurrency.run_ddl('ALTER TABLE accounts ADD COLUMN note text')});
	ok($node->safe_psql($db, q{SELECT max(id) FROM concurrency.ddl_log}) > $last_id,
		"$format: a run after the restore continues the ids");
	is($node->safe_psql($db, q{SELECT count(*) FROM concurrency.ddl_log}), '4', "$format: and is logged");
}

$node->stop;
done_testing();
