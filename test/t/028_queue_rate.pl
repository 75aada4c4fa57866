# rate_limit under load: 16 workers claim from a queue limited to 20 claims
# per second for 60 seconds (dequeue with wait: a worker held back by the
# limit sleeps until the window opens), and in no window of one second are
# there more than 20 claims, counted from the claim times the claims
# returned (lease_expires_at minus the lease). The workers keep the limit
# busy: over the run, most windows are full.
# Beside it, 8 more workers claim from a queue limited per concurrency key to
# 5 claims per second (key_rate_limit) over 4 keys: no key has more than 5
# claims in any window of one second, and the busiest windows are full.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $seconds = 60;
my $workers = 16;
my $limit = 20;
my $key_workers = 8;
my $key_limit = 5;
my $keys = 4;

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
SELECT concurrency.create_queue('kt', lease => '1 hour', key_rate_limit => $key_limit, key_rate_period => '1 second');
SELECT count(*) FROM concurrency.enqueue_batch('kt', array_fill('{}'::jsonb, ARRAY[@{[ $key_limit * $keys * $seconds * 2 ]}]),
                                               concurrency_keys => (SELECT array_agg('k' || (i % $keys))
                                                                      FROM generate_series(1, @{[ $key_limit * $keys * $seconds * 2 ]}) i));
CREATE TABLE claims (queue text, task_id bigint, claimed_at timestamptz NOT NULL, worker int NOT NULL,
                     concurrency_key text, PRIMARY KEY (queue, task_id));
-- a worker: claims up to 3 tasks at a time (waiting up to a second), records
-- each claim's time, completes them, commits; until its time is up
CREATE PROCEDURE rate_worker(q text, w int, seconds int) LANGUAGE plpgsql AS \$\$
DECLARE
    deadline timestamptz := clock_timestamp() + make_interval(secs => seconds);
    t record;
BEGIN
    WHILE clock_timestamp() < deadline LOOP
        FOR t IN SELECT * FROM concurrency.dequeue(q, 3, wait => '1 second') LOOP
            INSERT INTO claims
            SELECT q, t.task_id, t.lease_expires_at - interval '1 hour', w,
                   (SELECT concurrency_key FROM concurrency.task_status(q, t.task_id));
            PERFORM concurrency.complete(q, t.task_id, t.lease_token);
        END LOOP;
        COMMIT;
    END LOOP;
END
\$\$;
));

my @sessions;
for my $w (1 .. $workers + $key_workers) {
	my $s = $node->background_psql('postgres', on_error_stop => 1);
	my $q = $w <= $workers ? 'rt' : 'kt';
	$s->{stdin} .= "CALL rate_worker('$q', $w, $seconds);\n\\echo done $w\n";
	$s->{run}->pump_nb;
	push @sessions, $s;
}
for my $s (@sessions) {
	$s->{run}->pump until $s->{stdout} =~ /done \d+/ || !$s->{run}->pumpable;
	like($s->{stdout}, qr/done \d+/, 'a worker ran its time without an error');
	$s->quit;
}

my $total = $node->safe_psql('postgres', q(SELECT count(*) FROM claims WHERE queue = 'rt'));
my $busiest = $node->safe_psql('postgres', q(
SELECT max(n) FROM (
    SELECT count(*) OVER (ORDER BY claimed_at RANGE BETWEEN CURRENT ROW
                          AND interval '1 second' - interval '1 microsecond' FOLLOWING) AS n
      FROM claims WHERE queue = 'rt') w));
cmp_ok($busiest, '<=', $limit, "no window of one second has more than $limit claims (busiest: $busiest)");
# the limit was what held the workers back: they claimed close to it
cmp_ok($total, '>=', $limit * $seconds * 0.8, "the workers kept the limit busy ($total claims in $seconds s)");
is($busiest, $limit, 'the busiest window is full');
is($node->safe_psql('postgres', 'SELECT count(DISTINCT worker) FROM claims'), $workers + $key_workers,
	'every worker claimed');
is($node->safe_psql('postgres', q(SELECT count(*) FROM concurrency."q_rt" WHERE state = 'leased')), '0',
	'no lease left');

# the queue limited per key: per key, the same windows
my $key_busiest = $node->safe_psql('postgres', q(
SELECT max(n) FROM (
    SELECT count(*) OVER (PARTITION BY concurrency_key ORDER BY claimed_at RANGE BETWEEN CURRENT ROW
                          AND interval '1 second' - interval '1 microsecond' FOLLOWING) AS n
      FROM claims WHERE queue = 'kt') w));
cmp_ok($key_busiest, '<=', $key_limit,
	"no key has more than $key_limit claims in a window of one second (busiest: $key_busiest)");
is($key_busiest, $key_limit, "a key's busiest window is full");
my $key_total = $node->safe_psql('postgres', q(SELECT count(*) FROM claims WHERE queue = 'kt'));
# (each claim of this queue walks its keys with a few statements, and its
# waiters wake when a key's window opens: on 2 cores shared with the 16
# workers above, a key's claims come late by the time a woken worker waits
# for a core; alone, 8 workers claim 4.9 per key and second)
cmp_ok($key_total, '>=', $key_limit * $keys * $seconds * 0.5,
	"the workers kept every key's limit busy ($key_total claims in $seconds s)");
is($node->safe_psql('postgres', q(SELECT count(DISTINCT concurrency_key) FROM claims WHERE queue = 'kt')), $keys,
	'every key was claimed');

$node->stop;
done_testing();
