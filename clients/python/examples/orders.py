#!/usr/bin/env python3
"""An order as a durable workflow: charge the card, write the receipt, wait
for the customer's confirmation, ship.

    python3 examples/orders.py "dbname=shop"    # PG* environment variables fill in the rest

It creates the queue "orders" and the tables receipts and shipments if they
are missing, starts a worker, places order 1001, confirms it as the customer
would, waits for the workflow's end and prints it. Each step survives a
crash of the worker: the charge is asked for once per order (and carries an
idempotency key in case the worker dies between the payment service's answer
and the step's record), the receipt is written exactly once, and the wait
for the confirmation holds no worker and no connection.
"""
import datetime
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # clients/python

import psycopg  # noqa: E402

from concurrency_ext import Worker, await_task, emit_event, enqueue  # noqa: E402


def charge_card(order, idempotency_key):
    """Stands for a payment service's API: a real one takes the idempotency key and answers a repeated call
    with the first call's charge."""
    return {"charge_id": f"ch_{idempotency_key.replace(':', '_')}", "amount": order["amount"]}


def fulfil(task, conn):
    order = task.payload
    key = f"{task.queue}:{task.id}:charge"
    charge = task.step("charge", lambda: charge_card(order, idempotency_key=key))

    def write_receipt(tx):  # in the step's transaction: the receipt and the step's record commit together
        tx.execute("INSERT INTO receipts (order_id, charge_id, amount) VALUES (%s, %s, %s)",
                   (order["id"], charge["charge_id"], charge["amount"]))

    task.step("receipt", write_receipt, transaction=True)
    reply = task.wait_for_event(f"order-confirmed:{order['id']}", timeout=datetime.timedelta(days=3))
    if reply is None:
        return {"order": order["id"], "status": "not confirmed"}
    # the handler's own transaction: the shipment is recorded with the task's completion
    conn.execute("INSERT INTO shipments (order_id, address) VALUES (%s, %s)", (order["id"], reply["address"]))
    return {"order": order["id"], "status": "shipped", "charge_id": charge["charge_id"]}


def main(conninfo):
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("SELECT concurrency.create_queue('orders')")
        conn.execute("CREATE TABLE IF NOT EXISTS receipts "
                     "(order_id bigint PRIMARY KEY, charge_id text, amount numeric)")
        conn.execute("CREATE TABLE IF NOT EXISTS shipments (order_id bigint PRIMARY KEY, address text)")

        worker = Worker(conninfo, "orders", fulfil, concurrency=2)
        worker.start()
        try:
            task_id = enqueue(conn, "orders", {"id": 1001, "amount": 42.5})
            # later, from the web application, when the customer confirms:
            emit_event(conn, "order-confirmed:1001", {"address": "1 Main St"})
            end = await_task(conn, "orders", task_id, timeout=60)
            print(end.state, end.result)
        finally:
            worker.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
