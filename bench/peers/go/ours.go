package main

// The sides of concurrency_ext: the runtime (clients/go) and the raw loop
// it wraps.

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	concurrency "github.com/concurrency-ext/concurrency-ext/clients/go"
)

// reset empties the results and both systems and makes the queue peers
// (with key_limit 1 for a keyed row).
func reset(ctx context.Context, pool *pgxpool.Pool, keyed bool) error {
	create := "SELECT concurrency.create_queue('peers')"
	if keyed {
		create = "SELECT concurrency.create_queue('peers', key_limit => 1)"
	}
	_, err := pool.Exec(ctx, `TRUNCATE peers_results, river_job;
		SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name = 'peers';
		`+create)
	return err
}

// verify says whether each of the jobs was recorded once and the side's
// system holds none.
func verify(ctx context.Context, pool *pgxpool.Pool, side string, jobs int) (bool, error) {
	var n, distinct, left int
	if err := pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT job) FROM peers_results").Scan(&n, &distinct); err != nil {
		return false, err
	}
	leftSQL := `SELECT count(*) FROM concurrency."q_peers"`
	if side == "river" {
		leftSQL = "SELECT count(*) FROM river_job WHERE state <> 'completed'"
	}
	if err := pool.QueryRow(ctx, leftSQL).Scan(&left); err != nil {
		return false, err
	}
	ok := n == jobs && distinct == jobs && left == 0
	if !ok {
		log.Printf("%s: %d handled, %d distinct, %d left: NOT exactly once", side, n, distinct, left)
	}
	return ok, nil
}

func newPool(ctx context.Context, conns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = conns
	cfg.MinConns = conns
	return pgxpool.NewWithConfig(ctx, cfg)
}

func keyOf(i int) string { return fmt.Sprintf("k%d", i%keys) }

// fill makes the queue and enqueues the jobs (payload {"i": i}), chunk per
// EnqueueBatch, with their concurrency keys in a keyed row.
func fill(ctx context.Context, pool *pgxpool.Pool, jobs int, keyed bool) error {
	if err := reset(ctx, pool, keyed); err != nil {
		return err
	}
	for start := 0; start < jobs; start += chunk {
		payloads := make([]any, 0, chunk)
		var keyList []string
		for i := start; i < min(jobs, start+chunk); i++ {
			payloads = append(payloads, map[string]int{"i": i})
			if keyed {
				keyList = append(keyList, keyOf(i))
			}
		}
		var opts []concurrency.EnqueueOption
		if keyed {
			opts = append(opts, concurrency.ConcurrencyKeys(keyList))
		}
		if _, err := concurrency.EnqueueBatch(ctx, pool, "peers", payloads, opts...); err != nil {
			return err
		}
	}
	return nil
}

func runtimeDrain(ctx context.Context, spec rowSpec, jobs int, raw bool) (result, error) {
	setupPool, err := newPool(ctx, 2)
	if err != nil {
		return result{}, err
	}
	defer setupPool.Close()
	if err := fill(ctx, setupPool, jobs, spec.keyed); err != nil {
		return result{}, err
	}
	workers := spec.concurrency
	pool, err := newPool(ctx, int32(workers+2))
	if err != nil {
		return result{}, err
	}
	defer pool.Close()
	if raw {
		return rawDrain(ctx, pool, setupPool, workers, spec.batch, jobs)
	}
	var completed atomic.Int64
	finished := make(chan struct{})
	w := concurrency.NewWorker(pool, concurrency.WorkerConfig{Name: "peers",
		OnError: func(t *concurrency.Task, err error) { log.Printf("runtime: task %d: %v", t.ID, err) },
		OnComplete: func(*concurrency.Task) {
			if completed.Add(1) == int64(jobs) {
				close(finished)
			}
		}})
	if spec.batch > 1 {
		w.HandleBatch("peers", spec.batch, func(ctx context.Context, tx pgxTx, tasks []*concurrency.Task) error {
			ids := make([]int64, len(tasks))
			for i, t := range tasks {
				ids[i] = t.ID
			}
			_, err := tx.Exec(ctx, "INSERT INTO peers_results SELECT unnest($1::bigint[])", ids)
			return err
		}, concurrency.WithConcurrency(workers))
	} else {
		w.HandleTx("peers", func(ctx context.Context, tx pgxTx, task *concurrency.Task) error {
			_, err := tx.Exec(ctx, "INSERT INTO peers_results VALUES ($1)", task.ID)
			return err
		}, concurrency.WithConcurrency(workers))
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := measure(ctx, setupPool)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	select {
	case <-finished:
	case err := <-errc:
		cancel()
		return result{}, fmt.Errorf("runtime: Run returned early: %v", err)
	}
	var r result
	done(&r)
	cancel()
	if err := <-errc; err != nil {
		return result{}, err
	}
	r.OK, err = verify(ctx, setupPool, "runtime", jobs)
	return r, err
}

// untilDone runs loop in workers goroutines and times them.
func untilDone(ctx context.Context, pool *pgxpool.Pool, workers int, loop func() error) (result, error) {
	errc := make(chan error, workers)
	done := measure(ctx, pool)
	for range workers {
		go func() { errc <- loop() }()
	}
	var first error
	for range workers {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	var r result
	done(&r)
	return r, first
}

// rawDrain: each of workers goroutines holds a connection and loops; batch
// is the tasks per claim (complete_batch for more than one).
func rawDrain(ctx context.Context, pool, setup *pgxpool.Pool, workers, batch, jobs int) (result, error) {
	claim := fmt.Sprintf("SELECT task_id, lease_token FROM concurrency.dequeue('peers', %d)", batch)
	insert, complete := "INSERT INTO peers_results VALUES ($1)", "SELECT concurrency.complete('peers', $1, $2)"
	if batch > 1 {
		insert = "INSERT INTO peers_results SELECT unnest($1::bigint[])"
		complete = "SELECT concurrency.complete_batch('peers', $1::bigint[], $2::bigint[])"
	}
	// args gives the insert's and complete's arguments: one task, or arrays
	args := func(ids, tokens []int64) (any, any) {
		if batch > 1 {
			return ids, tokens
		}
		return ids[0], tokens[0]
	}
	var handled atomic.Int64
	r, err := untilDone(ctx, setup, workers, func() error {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		var ids, tokens []int64
		scan := func(rows pgx.Rows) error {
			ids, tokens = nil, nil // the last batch's arrays may still be an argument
			for rows.Next() {
				var id, token int64
				if err := rows.Scan(&id, &token); err != nil {
					return err
				}
				ids, tokens = append(ids, id), append(tokens, token)
			}
			rows.Close()
			return rows.Err()
		}
		for {
			if len(ids) == 0 {
				if handled.Load() >= int64(jobs) {
					return nil
				}
				rows, err := conn.Query(ctx, claim)
				if err != nil {
					return err
				}
				if err := scan(rows); err != nil {
					return err
				}
				if len(ids) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
			}
			n := len(ids)
			tx, err := conn.Begin(ctx)
			if err != nil {
				return err
			}
			idArg, tokenArg := args(ids, tokens)
			if _, err := tx.Exec(ctx, insert, idArg); err != nil {
				return err
			}
			b := &pgx.Batch{}
			b.Queue(complete, idArg, tokenArg)
			b.Queue(claim)
			br := tx.SendBatch(ctx, b)
			if _, err := br.Exec(); err != nil {
				return err
			}
			rows, err := br.Query()
			if err != nil {
				return err
			}
			if err := scan(rows); err != nil {
				return err
			}
			if err := br.Close(); err != nil {
				return err
			}
			if err := tx.Commit(ctx); err != nil {
				return err
			}
			handled.Add(int64(n))
		}
	})
	if err != nil {
		return result{}, err
	}
	r.OK, err = verify(ctx, setup, "raw", jobs)
	return r, err
}
