// Command worker is a small concurrency_ext worker: it sends the e-mails of
// queue "emails" (here: records them in table sent_mail, in the transaction
// that completes the task) until SIGTERM or Ctrl-C, then shuts down
// gracefully. With -enqueue N it first adds N tasks in one transaction with
// a business write.
//
//	PGHOST=/var/run/postgresql PGDATABASE=app go run ./examples/worker -enqueue 10
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	concurrency "github.com/concurrency-ext/concurrency-ext/clients/go"
)

type email struct {
	To string `json:"to"`
}

func main() {
	enqueue := flag.Int("enqueue", 0, "enqueue this many tasks first")
	workers := flag.Int("concurrency", 4, "handlers running at once")
	flag.Parse()

	// SIGTERM (e.g. from Kubernetes or systemd) and Ctrl-C cancel ctx: the
	// worker stops claiming, releases what it claimed but did not start, and
	// waits for the running handlers.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	// the connection from DATABASE_URL, or else the PG* environment
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	cfg.MaxConns = int32(*workers + 2) // handlers + the waiting claim + heartbeats
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	setup := `CREATE TABLE IF NOT EXISTS sent_mail (task_id bigint PRIMARY KEY, address text NOT NULL);
	          CREATE TABLE IF NOT EXISTS signups (address text NOT NULL);
	          SELECT concurrency.create_queue('emails', lease => '30 seconds', max_attempts => 5)`
	if _, err := pool.Exec(ctx, setup, pgx.QueryExecModeSimpleProtocol); err != nil {
		log.Fatal(err)
	}

	if *enqueue > 0 {
		// the producer: each task commits with its business write, or neither does
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for i := range *enqueue {
				address := fmt.Sprintf("user%d@example.org", i)
				if _, err := tx.Exec(ctx, "INSERT INTO signups VALUES ($1)", address); err != nil {
					return err
				}
				if _, err := concurrency.Enqueue(ctx, tx, "emails", email{To: address}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			log.Fatal(err)
		}
		log.Printf("enqueued %d tasks", *enqueue)
	}

	w := concurrency.NewWorker(pool, concurrency.WorkerConfig{ShutdownTimeout: 20 * time.Second})
	w.HandleTx("emails", func(ctx context.Context, tx pgx.Tx, task *concurrency.Task) error {
		var m email
		if err := task.Decode(&m); err != nil {
			return err // fails the task with the error's message
		}
		if m.To == "" {
			return errors.New("no address")
		}
		// the work's own write commits together with the task's completion
		_, err := tx.Exec(ctx, "INSERT INTO sent_mail VALUES ($1, $2)", task.ID, m.To)
		return err
	}, concurrency.WithConcurrency(*workers))

	log.Printf("working queue emails with %d handlers; SIGTERM or Ctrl-C to stop", *workers)
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	log.Print("stopped")
}
