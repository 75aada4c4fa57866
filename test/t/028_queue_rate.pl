# rate_limit under load: 16 workers claim from a queue limited to 20 claims
# per second for 60 seconds (dequeue with wait: a worker held back by the
# limit sleeps until the window opens), and in no window of one second are
# there more than 20 claims, counted from the claim times the claims
# returned (lease_expires_at minus the lease). The workers keep the limit
# busy: over the run, most windows are full.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $seconds = 60;
my $workers = 16;
my $limit = 20;

my $node = PostgreSQL::Test::Cluster->new('rate');
$node->init;
$node->append_conf(
	'postgresql.conf', q(
shared_preload_libraries = 'concurrency_ext'
max_connections = 40
));
$node->start;
$node->safe_psql('postgres', qq(
CREATE EXTENSION concurrency_ext;
SELECT concurrency.create_queue('rt', lease => '1 hour', rate_limit => $limit, rate_period => '1 second');
SELECT count(*) FROM concurrency.enqueue_batch('rt', array_fill('{}'::jsonb, ARRAY[@{[ $limit * $seconds * 2 ]}]));
CREATE TABLE claims (task_id bigint PRIMARY KEY, claimed_at timestamptz NOT NULL, worker int NOT NULL);
-- a worker: claims up to 3 tasks at a time (waiting up to a second), records
-- each claim's time, completes them, commits; until its time is up
CREATE PROCEDURE rate_worker(w int, seconds int) LANGUAGE plpgsql AS \$\$
DECLARE
    deadline timestamptz := clock_timestamp() + make_interval(secs => seconds);
    t record;
BEGIN
    WHILE clock_timestamp() < deadline LOOP
        FOR t IN SELECT * FROM concurrency.dequeue('rt', 3, wait => '1 second') LOOP
            INSERT INTO claims VALUES (t.task_id, t.lease_expires_at - interval '1 hour', w);
            PERFORM concurrency.complete('rt', t.task_id, t.lease_token);
        END LOOP;
        COMMIT;
    END LOOP;
END
\$\$;
));

my @sessions;
for my $w (1 .. $workers) {
	my $s = $node->background_psql('postgres', on_error_stop => 1);
	$s->{stdin} .= "CALL rate_worker($w, $seconds);\n\\echo done $w\n";
	$s->{run}->pump_nb;
	push @sessions, $s;
}
for my $s (@sessions) {
	$s->{run}->pump until $s->{stdout} =~ /done \d+/ || !$s->{run}->pumpable;
	like($s->{stdout}, qr/done \d+/, 'a worker ran its time without an error');
	$s->quit;
}

my $total = $node->safe_psql('postgres', 'SELECT count(*) FROM claims');
my $busiest = $node->safe_psql('postgres', q(
SELECT max(n) FROM (
    SELECT count(*) OVER (ORDER BY claimed_at RANGE BETWEEN CURRENT ROW
                          AND interval '1 second' - interval '1 microsecond' FOLLOWING) AS n
      FROM claims) w));
cmp_ok($busiest, '<=', $limit, "no window of one second has more than $limit claims (busiest: $busiest)");
# the limit was what held the workers back: they claimed close to it
cmp_ok($total, '>=', $limit * $seconds * 0.8, "the workers kept the limit busy ($total claims in $seconds s)");
is($busiest, $limit, 'the busiest window is full');
is($node->safe_psql('postgres', 'SELECT count(DISTINCT worker) FROM claims'), $workers, 'every worker claimed');
is($node->safe_psql('postgres', q(SELECT count(*) FROM concurrency."q_rt" WHERE state = 'leased')), '0',
	'no lease left');

$node->stop;
done_testing();
