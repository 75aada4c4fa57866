# A counter under faults: 32 clients buy 1 to 3 units of a 2,000-unit stock
# (each purchase inserts an order row and takes the units from the counter,
# in one transaction that holds them 0.1-0.2 s) while backends are
# terminated mid-purchase, one is SIGKILLed (the server resets every
# backend) and the server is restarted with an immediate shutdown. In the
# end exactly 2,000 units are sold, the counter is 0, no slot ever went
# below its floor, and the orders add up to the units sold.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/lib";
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use WorkerFaults;

my $stock   = 2000;
my $clients = 32;

my $node = PostgreSQL::Test::Cluster->new('counter_faults');
$node->init;
$node->append_conf('postgresql.conf', "restart_after_crash = on\nmax_connections = 80\n");
$node->start;

$node->safe_psql('postgres', qq{
  CREATE EXTENSION concurrency_ext;
  SELECT concurrency.create_counter('stock', slots => 16, min_value => 0);
  SELECT concurrency.counter_add('stock', $stock);
  SELECT concurrency.compact_counter('stock');   -- spread over the slots
  CREATE TABLE orders (id bigserial PRIMARY KEY, client text NOT NULL,
                       units integer NOT NULL CHECK (units BETWEEN 1 AND 3));
  CREATE TABLE refusals (client text NOT NULL, units integer NOT NULL);
});
# A client: buys until the stock is gone. A purchase that would oversell is
# refused by the counter (23514): its order row goes with it.
$node->safe_psql('postgres', q{
  CREATE PROCEDURE work(w text) LANGUAGE plpgsql AS $$
  DECLARE
    q integer;
  BEGIN
    LOOP
      EXIT WHEN concurrency.counter_value('stock') = 0;
      COMMIT;
      q := 1 + floor(random() * 3)::integer;
      PERFORM set_config('application_name', w || ':busy', false);
      BEGIN
        INSERT INTO orders (client, units) VALUES (w, q);
        PERFORM concurrency.counter_add('stock', -q);
        PERFORM pg_sleep(0.1 + random() * 0.1);   -- the purchase takes a while: faults land here
      EXCEPTION WHEN check_violation THEN
        INSERT INTO refusals VALUES (w, q);
      END;
      COMMIT;                                     -- the order and the units, together
      PERFORM set_config('application_name', w, false);
    END LOOP;
  END $$;
});

my $t0 = time();
my ($done, $started) = drain_under_faults($node, $clients, q{SELECT concurrency.counter_value('stock')});
my %done = %$done;
note('sold out in ' . (time() - $t0) . " s, client processes started: $started");

is($node->safe_psql('postgres', q{SELECT concurrency.counter_value('stock')}), '0', 'the stock is sold out');
is($node->safe_psql('postgres', q{SELECT sum(units) FROM orders}), $stock, 'the orders add up to exactly the stock');
is($node->safe_psql('postgres', q{SELECT count(*) FROM concurrency.counter_slot WHERE counter = 'stock' AND (value < 0 OR value < floor)}),
	'0', 'no slot below zero');
is($node->safe_psql('postgres', q{SELECT sum(floor) FROM concurrency.counter_slot WHERE counter = 'stock'}),
	'0', 'the floors still sum to min_value');
# every committed state kept each slot within its floor: the table's CHECK
# constraint says so for every row version ever written
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_constraint WHERE conrelid = 'concurrency.counter_slot'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%floor%'}),
	'1', 'slot values are checked against their floor');
# a purchase never deadlocks with another: each holds nothing of its own
# while it waits, and the one step that waits for several slots takes them in
# ascending order
my $log = slurp_file($node->logfile);
my $deadlocks = () = $log =~ /deadlock detected/g;
is($deadlocks, 0, 'no purchase deadlocked');
is($done{terminate}, 6, 'backends were terminated mid-purchase');
is($done{sigkill}, 1, 'a backend was SIGKILLed mid-purchase (the server reset every backend)');
is($done{'immediate restart'}, 1, 'the server was restarted with an immediate shutdown');
note('refused purchases (fewer units left than asked): '
	  . $node->safe_psql('postgres', 'SELECT count(*) FROM refusals'));

$node->stop;
done_testing();
