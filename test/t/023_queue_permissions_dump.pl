# Queue permissions survive pg_dump / pg_restore, into another cluster whose
# roles have other OIDs: concurrency.queue_permission stores roles as
# regrole, which pg_dump writes as role names and the restore reads back as
# the new cluster's roles. Permissions of a role dropped before the dump are
# left out of it (the configuration dump's filter), so no new role inherits
# them; PUBLIC stays PUBLIC and a role named "-" stays that role.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use DumpRestore;

my @roles = ('app_producer', 'app_worker', 'app_reader', 'app_ops', q{x'); DROP TABLE t; --}, '-');
my $create_roles = join '', map { my $r = $_; $r =~ s/"/""/g; qq{CREATE ROLE "$r";\n} } @roles;

my $node = PostgreSQL::Test::Cluster->new('perm_source');
$node->init;
$node->start;
$node->safe_psql('postgres', $create_roles . q{
  CREATE ROLE app_gone;
  CREATE EXTENSION concurrency_ext;
  SELECT concurrency.create_queue('emails');
  SELECT concurrency.create_queue('x";odd/**/name');
  SELECT concurrency.grant_queue('emails', 'app_producer', '{enqueue}');
  SELECT concurrency.grant_queue('emails', 'app_worker', '{work}');
  SELECT concurrency.grant_queue('emails', 'app_reader', '{read}');
  SELECT concurrency.grant_queue('emails', 'app_ops', '{manage,read}');
  SELECT concurrency.grant_queue('emails', 'app_gone', '{work}');
  SELECT concurrency.grant_queue('x";odd/**/name', 'x''); DROP TABLE t; --', '{work,read}');
  SELECT concurrency.grant_queue('x";odd/**/name', '-', '{enqueue}');
  SELECT concurrency.grant_queue('x";odd/**/name', 'public', '{enqueue}');
  SELECT concurrency.enqueue('emails', '{"to": "a@example.org"}');
  DROP ROLE app_gone;
});

# by role name: the OIDs differ between the clusters
my $permissions_sql = q{
  SELECT string_agg(format('%s|%s|%s', queue, grantee, permission), E'\n' ORDER BY queue, grantee::text, permission)
    FROM concurrency.queue_permission};
my $select_sql = q{
  SELECT string_agg(format('%s|%s', c.relname, a.grantee::regrole), E'\n' ORDER BY c.relname, a.grantee::regrole::text)
    FROM pg_class c, aclexplode(c.relacl) a
   WHERE c.relnamespace = 'concurrency'::regnamespace AND c.relname LIKE 'q\_%' AND a.privilege_type = 'SELECT'
     AND a.grantee <> c.relowner};
my $expected = $node->safe_psql('postgres', $permissions_sql . q{
   WHERE grantee = 0 OR EXISTS (SELECT FROM pg_roles r WHERE r.oid = grantee)});
my $selects = $node->safe_psql('postgres', $select_sql);
is($node->safe_psql('postgres', q{SELECT count(*) FROM concurrency.queue_permission
                                   WHERE grantee <> 0 AND NOT EXISTS (SELECT FROM pg_roles r WHERE r.oid = grantee)}),
	'1', 'source: the dropped role left a row behind');
like($expected, qr/^x";odd\/\*\*\/name\|-\|enqueue$/m, 'source: PUBLIC holds enqueue on the odd queue');
like($expected, qr/^x";odd\/\*\*\/name\|"-"\|enqueue$/m, 'source: the role named - holds enqueue on it too');

# the target cluster makes its roles in another order, after others, so that
# every OID differs; app_gone exists there, and must not get its namesake's rows
my $target = PostgreSQL::Test::Cluster->new('perm_target');
$target->init;
$target->start;
$target->safe_psql('postgres', join('', map { "CREATE ROLE filler_$_;\n" } 1 .. 5)
	  . join('', map { my $r = $_; $r =~ s/"/""/g; qq{CREATE ROLE "$r";\n} } reverse @roles)
	  . "CREATE ROLE app_gone;\n");
isnt($target->safe_psql('postgres', q{SELECT 'app_worker'::regrole::oid}),
	$node->safe_psql('postgres', q{SELECT 'app_worker'::regrole::oid}), 'the roles have other OIDs in the target');

for my $format ('custom', 'plain')
{
	my $db = "restored_$format";
	dump_and_restore($node, $target, $format, $db);
	is($target->safe_psql($db, $permissions_sql), $expected,
		"$format: every permission came back for the role of the same name; the dropped role's did not");
	is($target->safe_psql($db, $select_sql), $selects, "$format: read is SELECT on the table, as before");

	# and they mean the same: each role may do what it could, and no more
	my $as = sub {
		my ($role, $sql) = @_;
		(my $quoted = $role) =~ s/"/""/g;
		my ($ret, $out, $err) = $target->psql($db, qq{SET ROLE "$quoted"; $sql});
		return $ret == 0 ? "ok:$out" : ($err =~ /lacks permission (\w+)/ ? "refused:$1" : "error:$err");
	};
	is($as->('app_producer', q{SELECT concurrency.enqueue('emails', '{}') > 0}), 'ok:t', "$format: producer enqueues");
	is($as->('app_producer', q{SELECT count(*) FROM concurrency.dequeue('emails')}), 'refused:work',
		"$format: producer may not claim");
	is($as->('app_worker', q{SELECT count(*) FROM concurrency.dequeue('emails')}), 'ok:1', "$format: worker claims");
	like($as->('app_worker', q{SELECT count(*) FROM concurrency."q_emails"}), qr/^error:.*permission denied for table/,
		"$format: worker may not read the table");
	is($as->('app_reader', q{SELECT ready + leased FROM concurrency.queue_stats WHERE queue = 'emails'}), 'ok:2',
		"$format: reader sees the counts");
	is($as->('app_ops', q{SELECT concurrency.retry_dead('emails')}), 'ok:0', "$format: operator manages");
	is($as->('app_gone', q{SELECT count(*) FROM concurrency.dequeue('emails')}), 'refused:work',
		"$format: the new app_gone does not inherit the dropped role's permission");
	is($as->(q{x'); DROP TABLE t; --}, q{SELECT count(*) FROM concurrency.dequeue('x";odd/**/name')}), 'ok:0',
		"$format: the role named like SQL works the odd queue");
	is($as->('app_worker', q{SELECT concurrency.enqueue('x";odd/**/name', '{}') > 0}), 'ok:t',
		"$format: PUBLIC may enqueue into the odd queue");
	is($as->('app_worker', q{SELECT concurrency.grant_queue('emails', 'app_worker', '{manage}')}), 'refused:manage',
		"$format: a worker may not grant itself more");
}

$node->stop;
$target->stop;
done_testing();
