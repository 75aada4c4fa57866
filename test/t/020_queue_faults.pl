# Task queue under faults: several workers share a queue while their backends
# are terminated mid-task, one is SIGKILLed (the server resets every backend),
# and the server is restarted with an immediate shutdown. Afterwards every
# task's database effect exists exactly once, and no task is lost, stuck or
# dead.
#
# A worker is a procedure run by psql: it claims a task and commits (the lease
# is then on record), does the task's work -- one row in `effects` -- and
# completes the task in the same transaction as that row. A worker whose
# backend dies is simply started again, as a supervisor would.
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

my $node = PostgreSQL::Test::Cluster->new('queue_faults');
$node->init;
$node->append_conf('postgresql.conf', "restart_after_crash = on\n");
$node->start;

$node->safe_psql('postgres', qq{
  CREATE EXTENSION concurrency_ext;
  SELECT concurrency.create_queue('faults', lease => '1 second', max_attempts => 1000);
  CREATE TABLE effects (task_id bigint NOT NULL, n integer NOT NULL, attempt integer NOT NULL, worker text);
  SELECT count(*) FROM concurrency.enqueue_batch('faults',
    (SELECT array_agg(jsonb_build_object('n', i)) FROM generate_series(1, $tasks) AS i));
});
$node->safe_psql('postgres', q{
  CREATE PROCEDURE work(w text) LANGUAGE plpgsql AS $$
  DECLARE
    t record;
  BEGIN
    LOOP
      SELECT * INTO t FROM concurrency.dequeue('faults', worker => w);
      COMMIT;                                   -- the claim is on record
      IF t.task_id IS NULL THEN
        EXIT WHEN NOT EXISTS (SELECT FROM concurrency."q_faults");
        PERFORM pg_sleep(0.05);                 -- others hold the rest, or their leases must expire
        COMMIT;
        CONTINUE;
      END IF;
      PERFORM set_config('application_name', w || ':busy', false);
      INSERT INTO effects VALUES (t.task_id, (t.payload ->> 'n')::int, t.attempt, w);
      PERFORM pg_sleep(0.02 + random() * 0.03); -- the work takes a while: faults land here
      PERFORM concurrency.complete('faults', t.task_id, t.lease_token);
      COMMIT;                                   -- the effect and the completion, together
      PERFORM set_config('application_name', w, false);
    END LOOP;
  END $$;
});

my ($done, $started) = drain_under_faults($node, $workers, q{SELECT count(*) FROM concurrency."q_faults"});
my %done = %$done;

is($node->safe_psql('postgres', q{SELECT count(*) FROM concurrency."q_faults"}), '0', 'the queue is empty: no task lost or stuck');
is($done{terminate}, 6, 'backends were terminated mid-task');
is($done{sigkill}, 1, 'a backend was SIGKILLed mid-task (the server reset every backend)');
is($done{'immediate restart'}, 1, 'the server was restarted with an immediate shutdown');

my $effects = $node->safe_psql('postgres', q{
  SELECT count(*), count(DISTINCT task_id), count(DISTINCT n), min(n), max(n) FROM effects});
is($effects, "$tasks|$tasks|$tasks|1|$tasks", 'every task has its effect exactly once');
my $redelivered = $node->safe_psql('postgres', 'SELECT count(*) FROM effects WHERE attempt > 1');
ok($redelivered > 0, "tasks of killed workers were re-delivered after their lease ($redelivered)");
is($node->safe_psql('postgres', q{SELECT count(*) FROM concurrency."q_faults" WHERE state = 'dead'}),
	'0', 'no task is dead');
note("worker processes started: $started");

$node->stop;
done_testing();
