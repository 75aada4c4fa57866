# The fault driver of the TAP queue tests under faults (test/t/020_queue_faults.pl,
# test/t/027_queue_graph.pl): workers -- psql running CALL work('<name>'),
# which sets application_name '<name>:busy' while it holds a task -- drain a
# queue while, a quarter of a second apart and while enough work remains,
# busy backends are terminated, one is SIGKILLed (the server resets every
# backend) and the server is restarted with an immediate shutdown. A worker
# whose backend dies is started again, as a supervisor would.
package WorkerFaults;
use strict;
use warnings;
use Exporter 'import';
use IPC::Run;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Utils;

our @EXPORT = qw(drain_under_faults);

# drain_under_faults($node, $workers, $remaining_sql): runs $workers workers
# on $node's database postgres under the faults until $remaining_sql (a
# count of what is left to run) is 0 and every worker has ended, or the
# test timeout passes. Returns ({fault => how many were done}, workers started).
sub drain_under_faults
{
	my ($node, $workers, $remaining_sql) = @_;
	my %running;    # worker name -> IPC::Run harness
	my $started = 0;

	my $start_worker = sub {
		my ($name) = @_;
		my ($out, $err) = ('', '');
		$running{$name} = IPC::Run::start(
			[
				'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d',
				$node->connstr('postgres') . " application_name=$name",
				'-c', "CALL work('$name')"
			],
			'<', \undef, '>', \$out, '2>', \$err);
		$started++;
	};
	# Reaps workers that have ended; returns how many are still running.
	my $reap = sub {
		for my $name (keys %running)
		{
			my $h = $running{$name};
			eval { $h->pump_nb };
			next if $h->pumpable;
			$h->finish;
			delete $running{$name};
		}
		return scalar keys %running;
	};
	my $remaining = sub {
		my $count;
		my $ret = $node->psql('postgres', $remaining_sql, stdout => \$count);
		return $ret == 0 ? $count : undef;
	};
	my $busy_backend = sub {
		my $pid = '';
		$node->psql('postgres',
			q{SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'w%:busy' ORDER BY random() LIMIT 1},
			stdout => \$pid);
		return $pid;
	};

	$start_worker->("w$_") for 1 .. $workers;

	# The faults, in order, a quarter of a second apart, while enough work remains.
	my @faults = (
		('terminate') x 2,
		'immediate restart',
		('terminate') x 2,
		'sigkill',
		('terminate') x 2);
	my %done;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		usleep(250_000);
		my $left = $remaining->();
		if (@faults && defined $left && $left > 50)
		{
			my $fault = $faults[0];
			if ($fault eq 'immediate restart')
			{
				$node->stop('immediate');
				$node->start;
				shift @faults;
				$done{$fault}++;
			}
			else
			{
				my $pid = $busy_backend->();
				if ($pid ne '')
				{
					if ($fault eq 'terminate')
					{
						$node->psql('postgres', "SELECT pg_terminate_backend($pid)");
					}
					else
					{
						kill 'KILL', $pid;
						# wait until the postmaster has reset every backend and
						# accepts connections; a psql that the reset ends before it
						# has read its query makes IPC::Run die of a broken pipe:
						# try again
						for (1 .. 60)
						{
							last if eval { $node->poll_query_until('postgres', 'SELECT 1', '1') };
							usleep(500_000);
						}
					}
					shift @faults;
					$done{$fault}++;
				}
			}
		}
		# workers that died are started again (a worker that found nothing
		# left also ends; then nothing is left to restart it for)
		$reap->();
		$left = $remaining->();
		next unless defined $left;
		last if $left == 0 && $reap->() == 0;
		for my $name (map { "w$_" } 1 .. $workers)
		{
			$start_worker->($name) unless $running{$name} || $left == 0;
		}
	}
	$_->kill_kill for values %running;
	return (\%done, $started);
}

1;
