#!/usr/bin/env python3
"""Counters on a Citus cluster (coordinator + 2 workers).

A counter lives on the node where it was made (its tables are local tables
of that node, not distributed). Made on the coordinator, counter_add is part
of the transaction that also writes distributed tables: rolled back or
committed with them. A worker node does not see the coordinator's counters,
and a counter made on a worker node lives there.
"""
from citus_lib import COORDINATOR, WORKER1, check, connect, run, scalar, sqlstate_of


def setup():
    c = connect(COORDINATOR)
    c.execute("CREATE EXTENSION IF NOT EXISTS concurrency_ext")
    c.execute("SELECT concurrency.drop_counter(name) FROM concurrency.counters WHERE name = 'citus_stock'")
    c.execute("DROP TABLE IF EXISTS counter_orders")
    c.execute("CREATE TABLE counter_orders (id bigint PRIMARY KEY, units integer NOT NULL)")
    c.execute("SELECT create_distributed_table('counter_orders', 'id')")


def test_coordinator_counter_with_distributed_writes():
    c = connect(COORDINATOR)
    c.execute("SELECT concurrency.create_counter('citus_stock', slots => 4, min_value => 0)")
    c.execute("SELECT concurrency.counter_add('citus_stock', 100)")
    t = connect(COORDINATOR, autocommit=False)
    t.execute("INSERT INTO counter_orders VALUES (1, 5)")
    t.execute("SELECT concurrency.counter_add('citus_stock', -5)")
    t.rollback()
    check("a rolled-back order takes nothing, its distributed row gone with it",
          scalar(c, "SELECT concurrency.counter_value('citus_stock')") == 100
          and scalar(c, "SELECT count(*) FROM counter_orders") == 0)
    t.execute("INSERT INTO counter_orders VALUES (2, 7)")
    t.execute("SELECT concurrency.counter_add('citus_stock', -7)")
    t.commit()
    check("a committed order: the distributed row and the units together",
          scalar(c, "SELECT concurrency.counter_value('citus_stock')") == 93
          and scalar(c, "SELECT sum(units) FROM counter_orders") == 7)
    check("a withdrawal past min_value is refused (23514)",
          sqlstate_of(lambda: c.execute("SELECT concurrency.counter_add('citus_stock', -1000)")) == "23514")
    check("and changes nothing", scalar(c, "SELECT concurrency.counter_value('citus_stock')") == 93)


def test_a_counter_lives_on_one_node():
    w = connect(WORKER1)
    check("a worker node does not see the coordinator's counter (42704)",
          sqlstate_of(lambda: w.execute("SELECT concurrency.counter_value('citus_stock')")) == "42704")
    w.execute("SELECT concurrency.drop_counter(name) FROM concurrency.counters WHERE name = 'worker_local'")
    w.execute("SELECT concurrency.create_counter('worker_local', slots => 2)")
    w.execute("SELECT concurrency.counter_add('worker_local', 3)")
    check("a counter made on a worker node lives there",
          scalar(w, "SELECT concurrency.counter_value('worker_local')") == 3
          and sqlstate_of(lambda: connect(COORDINATOR).execute(
              "SELECT concurrency.counter_value('worker_local')")) == "42704")
    w.execute("SELECT concurrency.drop_counter('worker_local')")


def test_drop():
    c = connect(COORDINATOR)
    c.execute("SELECT concurrency.drop_counter('citus_stock')")
    c.execute("DROP TABLE counter_orders")
    check("dropped", scalar(c, "SELECT count(*) FROM concurrency.counters WHERE name = 'citus_stock'") == 0)


if __name__ == "__main__":
    setup()
    run([test_coordinator_counter_with_distributed_writes, test_a_counter_lives_on_one_node, test_drop])
