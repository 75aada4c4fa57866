# Dependencies under faults: a graph of 2,000 tasks (each after up to three
# earlier ones, in queues that retain nothing) is drained by four workers
# while their backends are terminated mid-task, one is SIGKILLed and the
# server is restarted with an immediate shutdown. Afterwards every task's
# effect exists exactly once, and every child's effect came after each of its
# parents' (the child was claimable only once its parents' completions, made
# in the same transactions as their effects, had committed); nothing is left
# waiting, and no edge is left behind.
#
# A worker is the one of test/t/020_queue_faults.pl: a procedure that claims
# a task and commits, then writes its effect (numbered by a sequence) and
# completes the task in one transaction.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WorkerFaults;

my $tasks   = 2000;
my $workers = 4;

my $node = PostgreSQL::Test::Cluster->new('queue_graph');
$node->init;
$node->append_conf('postgresql.conf', "restart_after_crash = on\n");
$node->start;

$node->safe_psql('postgres', qq{
  CREATE EXTENSION concurrency_ext;
  SELECT concurrency.create_queue('graph', lease => '1 second', max_attempts => 1000);
  CREATE SEQUENCE effect_order;
  CREATE TABLE effects (task_id bigint NOT NULL, n integer NOT NULL, attempt integer NOT NULL,
                        seq bigint NOT NULL DEFAULT nextval('effect_order'));
  SELECT setseed(0.42);
  CREATE TABLE edges AS
    SELECT DISTINCT i AS child, floor(random() * (i - 1))::int + 1 AS parent
      FROM generate_series(2, $tasks) AS i, generate_series(1, 3) AS k
     WHERE k <= i - 1;
  SELECT count(*) FROM concurrency.enqueue_graph('graph', (
    SELECT jsonb_agg(jsonb_build_object('ref', i::text, 'payload', jsonb_build_object('n', i),
                       'after', (SELECT coalesce(jsonb_agg(parent::text), '[]') FROM edges WHERE child = i))
                     ORDER BY i)
      FROM generate_series(1, $tasks) AS i));
});
$node->safe_psql('postgres', q{
  CREATE PROCEDURE work(w text) LANGUAGE plpgsql AS $$
  DECLARE
    t record;
  BEGIN
    LOOP
      SELECT * INTO t FROM concurrency.dequeue('graph', worker => w);
      COMMIT;                                   -- the claim is on record
      IF t.task_id IS NULL THEN
        EXIT WHEN NOT EXISTS (SELECT FROM concurrency."q_graph" WHERE state <> 'done');
        PERFORM pg_sleep(0.02);                 -- children wait for parents others hold
        COMMIT;
        CONTINUE;
      END IF;
      PERFORM set_config('application_name', w || ':busy', false);
      INSERT INTO effects (task_id, n, attempt) VALUES (t.task_id, (t.payload ->> 'n')::int, t.attempt);
      PERFORM pg_sleep(0.005 + random() * 0.01); -- the work takes a while: faults land here
      PERFORM concurrency.complete('graph', t.task_id, t.lease_token, jsonb_build_object('n', t.payload -> 'n'));
      COMMIT;                                   -- the effect and the completion, together
      PERFORM set_config('application_name', w, false);
    END LOOP;
  END $$;
});
my ($done, $started) = drain_under_faults($node, $workers, q{SELECT count(*) FROM concurrency."q_graph" WHERE state <> 'done'});
my %done = %$done;

is($node->safe_psql('postgres', q{SELECT count(*) FROM concurrency."q_graph" WHERE state <> 'done'}), '0', 'no task left to run: none lost, stuck or waiting');
ok($done{terminate} >= 1, 'backends were terminated mid-task');
is($done{sigkill}, 1, 'a backend was SIGKILLed mid-task (the server reset every backend)');
is($done{'immediate restart'}, 1, 'the server was restarted with an immediate shutdown');

my $effects = $node->safe_psql('postgres', q{
  SELECT count(*), count(DISTINCT task_id), count(DISTINCT n), min(n), max(n) FROM effects});
is($effects, "$tasks|$tasks|$tasks|1|$tasks", 'every task has its effect exactly once');
is($node->safe_psql('postgres', q{
  SELECT count(*) FROM edges e
    JOIN effects c ON c.n = e.child
    JOIN effects p ON p.n = e.parent
   WHERE c.seq < p.seq}), '0', 'every child ran after all of its parents');
ok($node->safe_psql('postgres', 'SELECT count(*) FROM edges') > $tasks, 'the graph has many edges');
my $redelivered = $node->safe_psql('postgres', 'SELECT count(*) FROM effects WHERE attempt > 1');
ok($redelivered > 0, "tasks of killed workers were re-delivered after their lease ($redelivered)");
is($node->safe_psql('postgres', q{SELECT count(*) FROM concurrency."q_graph" WHERE state <> 'done'}),
	'0', 'no task is dead, cancelled or waiting');
is($node->safe_psql('postgres', 'SELECT count(*) FROM concurrency.task_dependency'), '0', 'no edge is left');
$node->safe_psql('postgres', q{SELECT concurrency.purge('graph')});
is($node->safe_psql('postgres', q{SELECT count(*) FROM concurrency."q_graph"}), '0',
	'the parents kept for their children are purged then');
note("worker processes started: $started");

$node->stop;
done_testing();
