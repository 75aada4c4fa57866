'use strict';
// An order as a durable workflow: charge the card, write the receipt, wait
// for the customer to confirm the delivery address, ship.
//
//   node examples/order-workflow.js [queue]
//
// Connects with the PG* environment variables; needs the extension
// concurrency_ext (preloaded) and EXECUTE on concurrency.emit_event. Prints
// the order's outcome as JSON.
const { Pool } = require('pg');
const { Worker, enqueue, emitEvent, awaitTask } = require('concurrency-ext');

// A stand-in for a payment provider's API. Like most, it takes an
// idempotency key: a charge retried with the same key is charged once.
class Payments {
  constructor() {
    this.charges = new Map(); // idempotency key -> charge
  }

  async charge({ amount, idempotencyKey }) {
    if (!this.charges.has(idempotencyKey)) this.charges.set(idempotencyKey, { id: `ch_${this.charges.size + 1}`, amount });
    return this.charges.get(idempotencyKey);
  }
}

// The workflow. Each step runs once per order: a worker that crashes or a
// task that sleeps or waits runs the handler again from its start, and the
// steps done already return what they returned then.
function orderWorkflow(payments) {
  return async (task) => {
    const order = task.payload;

    // outside the database: at least once, so the provider gets the
    // step's key and charges once however often the step runs
    const charge = await task.step('charge', () =>
      payments.charge({ amount: order.amount, idempotencyKey: task.stepKey('charge') }),
    );

    // in the database: the receipt and the step's record commit together
    const receipt = await task.step(
      'receipt',
      async (tx) => {
        const { rows } = await tx.query(
          'INSERT INTO receipts (order_id, charge_id, amount) VALUES ($1, $2, $3) RETURNING id',
          [order.id, charge.id, order.amount],
        );
        return { id: rows[0].id };
      },
      { transaction: true },
    );

    // the task leaves the worker until the customer replies (or 3 days pass)
    const reply = await task.waitForEvent(`order-confirmed:${order.id}`, '3 days');
    if (reply === null) return { order: order.id, status: 'unconfirmed', receipt: receipt.id };

    const shipment = await task.step(
      'ship',
      async (tx) => {
        const { rows } = await tx.query('INSERT INTO shipments (order_id, address) VALUES ($1, $2) RETURNING id', [
          order.id,
          reply.address,
        ]);
        return { id: rows[0].id };
      },
      { transaction: true },
    );
    return { order: order.id, status: 'shipped', charge: charge.id, receipt: receipt.id, shipment: shipment.id };
  };
}

async function setUp(pool, queue) {
  await pool.query('SELECT concurrency.create_queue($1)', [queue]);
  await pool.query('CREATE TABLE IF NOT EXISTS receipts (id bigserial PRIMARY KEY, order_id text NOT NULL, charge_id text NOT NULL, amount numeric NOT NULL)');
  await pool.query('CREATE TABLE IF NOT EXISTS shipments (id bigserial PRIMARY KEY, order_id text NOT NULL, address text NOT NULL)');
}

async function main(queue = 'orders') {
  const pool = new Pool({ max: 4 });
  await setUp(pool, queue);
  const payments = new Payments();
  const worker = new Worker({ pool, queue, handler: orderWorkflow(payments) });
  const order = { id: `order-${process.pid}-${Date.now()}`, amount: 49.9 };
  // the customer, asked once the order waits for them, confirms the address
  // (this could as well come first: the event is kept for the wait)
  worker.on('suspended', (task, reason) => {
    console.error(`task ${task.id} waits for ${reason.event}`);
    emitEvent(pool, `order-confirmed:${order.id}`, { address: '1 Harbour Street, Portsmouth' }).catch(console.error);
  });
  await worker.start();

  const taskId = await enqueue(pool, queue, order);
  const outcome = await awaitTask(pool, queue, taskId, { timeout: 60000 });
  console.log(JSON.stringify({ taskId, ...outcome, charges: payments.charges.size }));

  await worker.stop();
  await pool.end();
}

module.exports = { orderWorkflow, Payments, setUp };

if (require.main === module) {
  main(process.argv[2]).catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
