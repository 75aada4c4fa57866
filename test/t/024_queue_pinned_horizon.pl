# The claim cursor under a pinned xmin horizon, and over a deep backlog. While an old snapshot keeps
# the index entries of claimed tasks from being removed, a scan of the ready
# index from the front walks over every one of them. A backend that sees the
# horizon pinned resumes its scans at the claim key of its last claim instead
# (src/queue/claim_cursor.hpp), so its claims stay cheap.
#
# Counted with the ready index's idx_tup_read (index entries its scans
# returned): a new backend's first claim starts from the front and reads
# every dead entry -- which shows the entries are there and counted -- while
# the claims of a backend that has been claiming read a small part of that.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $tasks  = 3000;
my $before = 1000;    # tasks claimed (and completed) while the horizon is pinned, before counting
my $counted = 300;    # claims counted afterwards

my $node = PostgreSQL::Test::Cluster->new('pinned_horizon');
$node->init;
$node->append_conf('postgresql.conf', "autovacuum = off\n");
$node->start;
$node->safe_psql('postgres', qq{
  CREATE EXTENSION concurrency_ext;
  SELECT concurrency.create_queue('pinned');
  SELECT count(*) FROM concurrency.enqueue_batch('pinned',
    (SELECT array_agg(jsonb_build_object('n', i)) FROM generate_series(1, $tasks) AS i));
});
$node->safe_psql('postgres', q{
  CREATE PROCEDURE burn_xids(n int) LANGUAGE plpgsql AS $$
  BEGIN
    FOR i IN 1 .. n LOOP PERFORM txid_current(); COMMIT; END LOOP;
  END $$;
  -- one task per transaction, as a worker claims and completes them
  CREATE PROCEDURE claim(q text, n int) LANGUAGE plpgsql AS $$
  DECLARE
    t record;
  BEGIN
    FOR i IN 1 .. n LOOP
      SELECT * INTO t FROM concurrency.dequeue(q);
      IF t.task_id IS NULL THEN
        RAISE EXCEPTION 'no task to claim';
      END IF;
      PERFORM concurrency.complete(q, t.task_id, t.lease_token);
      COMMIT;
    END LOOP;
  END $$;
});
my $ready = $node->safe_psql('postgres', q{
  SELECT indexrelid FROM pg_index
   WHERE indrelid = 'concurrency."q_pinned"'::regclass AND pg_get_expr(indpred, indrelid) LIKE '%''ready''%'});
like($ready, qr/^\d+$/, 'the queue has its ready index');

# entries returned by scans of the ready index, as the statistics have them
sub entries_read {
	return $node->safe_psql('postgres', "SELECT idx_tup_read FROM pg_stat_all_indexes WHERE indexrelid = $ready");
}

# Sends a session's pending statistics now (the flush happens at the end of
# the statement after the request).
sub flush_stats {
	my ($session) = @_;
	$session->query_safe('SELECT pg_stat_force_next_flush()');
	$session->query_safe('SELECT 1');
}

# The old snapshot, then enough transaction ids after it for the cursor to
# count the horizon as pinned.
my $pin = $node->background_psql('postgres');
$pin->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$pin->query_safe('SELECT count(*) FROM pg_class');
$node->safe_psql('postgres', 'CALL burn_xids(1500)');

my $worker = $node->background_psql('postgres');
$worker->query_safe("CALL claim('pinned', $before)");
flush_stats($worker);

# A new backend's first claim scans from the front: over the dead entries.
my $r0 = entries_read();
$node->safe_psql('postgres', q{CALL claim('pinned', 1); SELECT pg_stat_force_next_flush()});
my $first = entries_read() - $r0;
cmp_ok($first, '>=', $before, "a first claim from the front reads the $before dead entries ($first read)");

# The worker, which has been claiming all along, resumes at its last claim.
# Starting from the front, its claims would read about $before entries each;
# the cursor still starts from the front every 100 ms, which a claim that
# takes a few milliseconds does not reach often.
flush_stats($worker);
my $r1 = entries_read();
$worker->query_safe("CALL claim('pinned', $counted)");
flush_stats($worker);
my $resumed = entries_read() - $r1;
cmp_ok($resumed, '<', $counted * $before / 4,
	"$counted resumed claims read far fewer entries than from the front ($resumed read)");

# the tasks were claimed once each, in claim order, and the rest wait
is( $node->safe_psql('postgres',
		q{SELECT count(*), min((payload->>'n')::int) FROM concurrency."q_pinned" WHERE state = 'ready'}),
	($tasks - $before - 1 - $counted) . '|' . ($before + 2 + $counted),
	'every claimed task was the first ready one');

$pin->query_safe('COMMIT');
$pin->quit;
$worker->quit;

# A deep backlog under a fresh horizon. The entries of claimed tasks are
# killed as scans pass them (they are no longer read as entries), but the
# pages they fill stay until VACUUM (autovacuum is off here, and looks at most
# once a minute otherwise): a claim from the front reads every one of them. A
# backend whose claims from the front read more buffers than a fresh queue's
# would resumes its scans after its last claim, as under a pinned horizon.
# Counted with the ready index's blocks read (idx_blks_hit + idx_blks_read).
my ($deep, $drained) = (8000, 4000);
$node->safe_psql('postgres', qq{
  SELECT concurrency.create_queue('backlog');
  SELECT count(*) FROM concurrency.enqueue_batch('backlog',
    (SELECT array_agg(jsonb_build_object('n', i)) FROM generate_series(1, $deep) AS i));
});
my $backlog_ready = $node->safe_psql('postgres', q{
  SELECT indexrelid FROM pg_index
   WHERE indrelid = 'concurrency."q_backlog"'::regclass AND pg_get_expr(indpred, indrelid) LIKE '%''ready''%'});
sub blocks_read {
	return $node->safe_psql('postgres',
		"SELECT idx_blks_hit + idx_blks_read FROM pg_statio_all_indexes WHERE indexrelid = $backlog_ready");
}
my $drainer = $node->background_psql('postgres');
$drainer->query_safe("CALL claim('backlog', $drained)");
flush_stats($drainer);

# a new backend's first claim starts from the front: over the dead pages
my $b0 = blocks_read();
$node->safe_psql('postgres', q{CALL claim('backlog', 1); SELECT pg_stat_force_next_flush()});
my $front = blocks_read() - $b0;
cmp_ok($front, '>=', 10, "a claim from the front reads the pages of $drained dead entries ($front blocks)");

# the backend that has been claiming reads a few blocks a claim: the descent
# to its last claim's leaf, and a scan from the front every 100 ms
flush_stats($drainer);
my $b1 = blocks_read();
$drainer->query_safe("CALL claim('backlog', $counted)");
flush_stats($drainer);
my $per_claim = (blocks_read() - $b1) / $counted;
cmp_ok($per_claim, '<', $front / 2,
	"$counted claims after $drained read few blocks each ($per_claim a claim, $front from the front)");
is( $node->safe_psql('postgres',
		q{SELECT count(*), min((payload->>'n')::int) FROM concurrency."q_backlog" WHERE state = 'ready'}),
	($deep - $drained - 1 - $counted) . '|' . ($drained + 2 + $counted),
	'the backlog was claimed in order, each task once');
$drainer->quit;
$node->stop;
done_testing();
