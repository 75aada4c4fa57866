// Command workflow runs an order as a durable workflow on concurrency_ext:
// charge the card, write the receipt, wait for the customer to confirm the
// delivery address, ship. Each step's result is kept with the task, so the
// handler can stop at any point — a crash, a deploy, a wait of days for the
// customer — and carry on where it was: a step that is done is not done
// again.
//
// It places one order, runs a worker for queue "shop_orders", plays the customer
// (who confirms the address a moment later) and prints the outcome.
//
//	PGHOST=/var/run/postgresql PGDATABASE=app go run ./examples/workflow
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	concurrency "github.com/concurrency-ext/concurrency-ext/clients/go"
)

// order is a task's payload.
type order struct {
	ID          int64  `json:"id"`
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amount_cents"`
}

// payment is what the payment service returns for a charge.
type payment struct {
	ID string `json:"id"`
}

// reply is the customer's answer (the event's payload).
type reply struct {
	Address string `json:"address"`
}

// shipped is the task's result.
type shipped struct {
	Payment  string `json:"payment"`
	Receipt  int64  `json:"receipt"`
	Shipment int64  `json:"shipment"`
	Address  string `json:"address"`
}

// payments stands for an outside payment service: like real ones, it takes
// an idempotency key and charges once per key.
type payments struct {
	mu      sync.Mutex
	charges map[string]payment
}

func (p *payments) charge(_ context.Context, idempotencyKey, customer string, cents int64) (payment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.charges[idempotencyKey]; ok {
		return c, nil // a retry of a charge already made
	}
	c := payment{ID: fmt.Sprintf("pay_%d", len(p.charges)+1)}
	p.charges[idempotencyKey] = c
	log.Printf("charged %s %d.%02d (%s)", customer, cents/100, cents%100, c.ID)
	return c, nil
}

// replyEvent names the event the order's workflow waits for.
func replyEvent(orderID int64) string { return fmt.Sprintf("address-confirmed:order-%d", orderID) }

// handleOrder is the workflow. It runs again from the top after each
// suspension; the steps done already return their recorded results at once.
func handleOrder(pay *payments) concurrency.HandlerFunc {
	return func(ctx context.Context, task *concurrency.Task) error {
		var o order
		if err := task.Decode(&o); err != nil {
			return err
		}

		// 1. Charge the card. An outside call happens at least once (the
		// worker may die after the call, before its result is recorded), so
		// the payment service gets the step's key as its idempotency key.
		p, err := concurrency.Step(ctx, task, "charge", func(ctx context.Context) (payment, error) {
			return pay.charge(ctx, task.StepKey("charge"), o.Customer, o.AmountCents)
		})
		if err != nil {
			return err
		}

		// 2. Write the receipt: a database step, done exactly once (the
		// write and the step's record commit together).
		receipt, err := concurrency.StepTx(ctx, task, "receipt", func(ctx context.Context, tx pgx.Tx) (int64, error) {
			var id int64
			err := tx.QueryRow(ctx, "INSERT INTO shop_receipts (order_id, payment, amount_cents) VALUES ($1, $2, $3) RETURNING id",
				o.ID, p.ID, o.AmountCents).Scan(&id)
			return id, err
		})
		if err != nil {
			return err
		}

		// 3. Wait for the customer to confirm the address, for a week at
		// most. Until the reply comes the task is parked in the database:
		// no worker, no connection. ErrSuspended goes back to the worker.
		address := "the address on file"
		payload, err := task.WaitForEvent(ctx, replyEvent(o.ID), 7*24*time.Hour)
		switch {
		case errors.Is(err, concurrency.ErrEventTimeout):
			// no answer within the week: ship to the address on file
		case err != nil:
			if errors.Is(err, concurrency.ErrSuspended) {
				log.Printf("order %d: receipt %d written; waiting for the customer", o.ID, receipt)
			}
			return err
		default:
			var r reply
			if err := json.Unmarshal(payload, &r); err != nil {
				return err
			}
			address = r.Address
		}

		// 4. Ship.
		shipment, err := concurrency.StepTx(ctx, task, "ship", func(ctx context.Context, tx pgx.Tx) (int64, error) {
			var id int64
			err := tx.QueryRow(ctx, "INSERT INTO shop_shipments (order_id, address) VALUES ($1, $2) RETURNING id",
				o.ID, address).Scan(&id)
			return id, err
		})
		if err != nil {
			return err
		}
		return task.SetResult(shipped{Payment: p.ID, Receipt: receipt, Shipment: shipment, Address: address})
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	// the connection from DATABASE_URL, or else the PG* environment
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	cfg.MaxConns = 6 // a handler (and its step), the waiting claim, heartbeats, the producer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	setup := `CREATE TABLE IF NOT EXISTS shop_orders (id bigserial PRIMARY KEY, customer text NOT NULL, amount_cents bigint NOT NULL);
	          CREATE TABLE IF NOT EXISTS shop_receipts (id bigserial PRIMARY KEY, order_id bigint NOT NULL UNIQUE,
	                                               payment text NOT NULL, amount_cents bigint NOT NULL);
	          CREATE TABLE IF NOT EXISTS shop_shipments (id bigserial PRIMARY KEY, order_id bigint NOT NULL UNIQUE, address text NOT NULL);
	          SELECT concurrency.create_queue('shop_orders', lease => '30 seconds', max_attempts => 5)
	           WHERE NOT EXISTS (SELECT FROM concurrency.queue WHERE name = 'shop_orders')`
	if _, err := pool.Exec(ctx, setup, pgx.QueryExecModeSimpleProtocol); err != nil {
		log.Fatal(err)
	}

	// the shop: the order and its workflow commit together
	client := concurrency.NewClient(pool)
	o := order{Customer: "ana@example.org", AmountCents: 4990}
	var taskID int64
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "INSERT INTO shop_orders (customer, amount_cents) VALUES ($1, $2) RETURNING id",
			o.Customer, o.AmountCents).Scan(&o.ID); err != nil {
			return err
		}
		taskID, err = client.EnqueueTx(ctx, tx, "shop_orders", o)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("order %d placed", o.ID)

	w := concurrency.NewWorker(pool, concurrency.WorkerConfig{ShutdownTimeout: 10 * time.Second})
	w.Handle("shop_orders", handleOrder(&payments{charges: map[string]payment{}}))
	workerCtx, stopWorker := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(workerCtx) }()

	// the customer answers a moment later (in a real shop: a web request)
	go func() {
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return
		}
		if _, err := client.EmitEvent(ctx, replyEvent(o.ID), reply{Address: "Rua Augusta 12, Lisboa"}); err != nil {
			log.Print(err)
			return
		}
		log.Printf("order %d: the customer confirmed the address", o.ID)
	}()

	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := client.AwaitTask(waitCtx, "shop_orders", taskID)
	stopWorker()
	if werr := <-done; werr != nil {
		log.Print(werr)
	}
	if err != nil {
		log.Fatal(err)
	}
	if out.State != "done" {
		log.Fatalf("order %d: %s: %s", o.ID, out.State, out.LastError)
	}
	var s shipped
	if err := out.Decode(&s); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("order %d shipped to %s: payment %s, receipt %d, shipment %d\n", o.ID, s.Address, s.Payment, s.Receipt, s.Shipment)
}
