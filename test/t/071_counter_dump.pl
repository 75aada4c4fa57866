# pg_dump / pg_restore keep counters: every counter with its slots (value,
# floor and ceiling), its bounds, its owner and its permissions, in the
# custom and the plain format; the restored counter works on, bounds and
# permissions included.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DumpRestore;

my $node = PostgreSQL::Test::Cluster->new('counter_dump');
$node->init;
$node->start;

$node->safe_psql('postgres', q{
  CREATE EXTENSION concurrency_ext;
  CREATE ROLE dump_owner;
  CREATE ROLE dump_user;
  GRANT EXECUTE ON FUNCTION concurrency.create_counter(text, integer, numeric, numeric) TO dump_owner;
  SET ROLE dump_owner;
  SELECT concurrency.create_counter('stock', 8, min_value => 0, max_value => 100000);
  SELECT concurrency.counter_add('stock', 5000);
  SELECT concurrency.compact_counter('stock');
  SELECT concurrency.counter_add('stock', -7);
  SELECT concurrency.grant_counter('stock', 'dump_user', 'use');
  RESET ROLE;
  SELECT concurrency.create_counter('hits', 4);
  SELECT concurrency.counter_add('hits', 1.25) FROM generate_series(1, 10);
});

my $state = q{
  SELECT string_agg(format('%s|%s|%s|%s|%s', c.name, c.slots, c.min_value, c.max_value, c.owner), ';' ORDER BY c.name)
         || ' / ' || (SELECT string_agg(format('%s:%s:%s:%s:%s', counter, slot, value, floor, ceiling), ';' ORDER BY counter, slot)
                        FROM concurrency.counter_slot)
         || ' / ' || (SELECT string_agg(format('%s:%s:%s', counter, grantee, permission), ';' ORDER BY 1)
                        FROM concurrency.counter_permission)
    FROM concurrency.counter AS c};
my $before = $node->safe_psql('postgres', $state);

for my $format ('custom', 'plain')
{
	my $db = "restored_$format";
	dump_and_restore($node, $node, $format, $db);
	is($node->safe_psql($db, $state), $before, "$format: every counter, slot and permission is back");
	is($node->safe_psql($db, q{SELECT concurrency.counter_value('stock'), concurrency.counter_value('hits')}),
		'4993|12.50', "$format: the values are back");
	# the restored counter works on: its user adds, its bound holds
	is($node->safe_psql($db, q{SET ROLE dump_user; SELECT concurrency.counter_add('stock', -3); SELECT concurrency.counter_value('stock')}),
		"\n4990", "$format: the granted role still uses the counter");
	my ($ret, $out, $err) = $node->psql($db, q{SELECT concurrency.counter_add('stock', -5000)});
	like($err, qr/would go below its min_value/, "$format: the bound still holds");
}

$node->stop;
done_testing();
