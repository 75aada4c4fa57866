# LISTEN users with the module preloaded (concurrency.notify = background, the
# default): the committing transaction sends no NOTIFY of its own (it can be
# PREPAREd, which a transaction that notified cannot), and the database's
# notifier tells the queue's channel after the commit: a direct listener
# hears it, a burst of commits is told in few notifications (at most one per
# concurrency.notify_interval), more queues in one transaction than it notes
# are all told, a terminated notifier is replaced at the next commit, and
# concurrency.notify = commit brings back the NOTIFY inside the transaction;
# COMMIT PREPARED of a prepared enqueue wakes its waiters and listeners.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('notify');
$node->init;
$node->append_conf(
	'postgresql.conf', q(
shared_preload_libraries = 'concurrency_ext'
max_prepared_transactions = 5
concurrency.wait_poll_interval = '1h'
autovacuum = off
));
$node->start;
$node->safe_psql('postgres', q(
CREATE EXTENSION concurrency_ext;
SELECT concurrency.create_queue('tn');
SELECT concurrency.create_queue('tn_' || i) FROM generate_series(1, 20) i;
));

my $listener = $node->background_psql('postgres');
$listener->query_safe('LISTEN concurrency_tn');
$listener->query_safe('LISTEN concurrency_tn_20');

# What the listener has been told since the last call, by channel.
sub heard {
	my %n;
	my $out = $listener->query_safe('SELECT 1');
	$n{$1}++ while $out =~ /Asynchronous notification "([^"]+)"/g;
	return \%n;
}

# Polls until `channel` is heard (at most 30 s); the count heard meanwhile.
sub await_heard {
	my ($channel) = @_;
	my $count = 0;
	for (1 .. 300) {
		my $n = heard();
		$count += $n->{$channel} // 0;
		return $count if $count;
		usleep(100_000);
	}
	return 0;
}

# --- the committing transaction sends no NOTIFY: it can be prepared ---
my ($rc, $out, $err) = $node->psql('postgres', q(
BEGIN;
SELECT concurrency.enqueue('tn', '{"n": 1}');
PREPARE TRANSACTION 'enq';
COMMIT PREPARED 'enq';
));
is($rc, 0, 'an enqueue transaction can be prepared: it sent no NOTIFY') or diag($err);

# --- a direct listener hears the commit, told by the notifier ---
heard();
$node->safe_psql('postgres', q(SELECT concurrency.enqueue('tn', '{"n": 2}')));
ok(await_heard('concurrency_tn'), 'a LISTEN session hears concurrency_tn after the commit');
is($node->safe_psql('postgres',
		q(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'concurrency_ext notifier' AND datname = 'postgres')),
	'1', "the database's notifier runs");

# --- a burst of commits: at most one notification per interval ---
$node->append_conf('postgresql.conf', q(concurrency.notify_interval = '2s'));
$node->reload;
$node->poll_query_until('postgres', q(SELECT setting = '2000' FROM pg_settings WHERE name = 'concurrency.notify_interval'))
  or die 'the interval was not reloaded';
await_heard('concurrency_tn'); # whatever was told before
my $started = time();
$node->safe_psql('postgres', join '', map { qq(SELECT concurrency.enqueue('tn', '{"burst": $_}');\n) } 1 .. 40);
my $elapsed = time() - $started;
my $told = await_heard('concurrency_tn');
usleep(2_100_000);
$told += heard()->{concurrency_tn} // 0;
my $bound = int($elapsed / 2) + 2;
ok($told >= 1 && $told <= $bound,
	sprintf('40 commits in %.2f s were told in %d notification(s) (at most %d)', $elapsed, $told, $bound));
$node->append_conf('postgresql.conf', q(concurrency.notify_interval = '20ms'));
$node->reload;

# --- more queues in one transaction than it notes: every queue is told ---
$node->safe_psql('postgres', q(
BEGIN;
SELECT concurrency.enqueue('tn_' || i, '{}') FROM generate_series(1, 20) i;
COMMIT;
));
ok(await_heard('concurrency_tn_20'), 'the 20th queue of one transaction is told too');

# --- a terminated notifier is replaced at the next commit ---
$node->safe_psql('postgres', q(SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'concurrency_ext notifier'));
$node->poll_query_until('postgres', q(SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'concurrency_ext notifier'))
  or die 'the notifier did not stop';
heard();
$node->safe_psql('postgres', q(SELECT concurrency.enqueue('tn', '{"n": 3}')));
ok(await_heard('concurrency_tn'), 'after its notifier was terminated, the next commit is heard');

# --- concurrency.notify = commit: the NOTIFY is in the transaction again ---
($rc, $out, $err) = $node->psql('postgres', q(
SET concurrency.notify = commit;
BEGIN;
SELECT concurrency.enqueue('tn', '{"n": 4}');
PREPARE TRANSACTION 'enq2';
));
like($err, qr/cannot PREPARE a transaction that has executed LISTEN, UNLISTEN, or NOTIFY/,
	"with notify = commit the transaction notifies itself");

# --- off: the transaction sends nothing and marks nothing ---
($rc, $out, $err) = $node->psql('postgres', q(
SET concurrency.notify = off;
BEGIN;
SELECT concurrency.enqueue('tn', '{"n": 5}');
PREPARE TRANSACTION 'enq3';
COMMIT PREPARED 'enq3';
));
is($rc, 0, 'with notify = off the transaction can be prepared') or diag($err);

# --- COMMIT PREPARED tells the prepared transaction's waiters and listeners ---
$node->safe_psql('postgres', q(SELECT concurrency.create_queue('tp')));
my $waiter = $node->background_psql('postgres', on_error_stop => 0);
$waiter->query_safe("SET application_name = 'prepared_waiter'");
$waiter->{stdin} .= "SELECT 'claimed ' || count(*) FROM concurrency.dequeue('tp', wait => '1 hour');\n";
$waiter->{run}->pump_nb;
$node->poll_query_until('postgres',
	q(SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'prepared_waiter' AND wait_event_type = 'Extension'))
  or die 'the waiter does not wait';
$node->safe_psql('postgres', q(
BEGIN;
SELECT concurrency.enqueue('tp', '{"prepared": 1}');
PREPARE TRANSACTION 'woken';
));
$listener->query_safe('LISTEN concurrency_tp');
heard();
$node->safe_psql('postgres', q(COMMIT PREPARED 'woken'));
$waiter->{run}->pump until $waiter->{stdout} =~ /claimed \d+/ || $waiter->{stderr} =~ /ERROR/;
like($waiter->{stdout}, qr/claimed 1/, 'COMMIT PREPARED wakes a waiter of the prepared enqueue (no polling here)');
$waiter->quit;
ok(await_heard('concurrency_tp'), "COMMIT PREPARED tells the queue's listeners");

$listener->quit;
$node->stop;
done_testing();
