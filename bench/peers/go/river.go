package main

// River's sides: river (its batched completer) and river-tx (JobCompleteTx).

import (
	"context"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

type peerArgs struct {
	I int `json:"i"`
}

func (peerArgs) Kind() string { return "peer" }

type peerWorker struct {
	river.WorkerDefaults[peerArgs]
	pool *pgxpool.Pool
	tx   bool // insert and complete in one transaction
}

func (w *peerWorker) Work(ctx context.Context, job *river.Job[peerArgs]) error {
	if !w.tx {
		_, err := w.pool.Exec(ctx, "INSERT INTO peers_results VALUES ($1)", job.ID)
		return err
	}
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO peers_results VALUES ($1)", job.ID); err != nil {
			return err
		}
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
}

func riverDriver(pool *pgxpool.Pool) *riverpgxv5.Driver { return riverpgxv5.New(pool) }

func riverClient(pool *pgxpool.Pool, workers int, tx bool) (*river.Client[pgxTx], error) {
	ws := river.NewWorkers()
	river.AddWorker(ws, &peerWorker{pool: pool, tx: tx})
	return river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:           ws,
		FetchCooldown:     time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            quietLogger(),
	})
}

func riverDrain(ctx context.Context, setup *pgxpool.Pool, workers, jobs int, tx bool) (result, error) {
	if err := reset(ctx, setup, false); err != nil {
		return result{}, err
	}
	inserter, err := riverClient(setup, 1, false)
	if err != nil {
		return result{}, err
	}
	for start := 0; start < jobs; start += chunk {
		params := make([]river.InsertManyParams, 0, chunk)
		for i := start; i < min(jobs, start+chunk); i++ {
			params = append(params, river.InsertManyParams{Args: peerArgs{I: i}})
		}
		if _, err := inserter.InsertMany(ctx, params); err != nil {
			return result{}, err
		}
	}
	pool, err := newPool(ctx, int32(workers+4))
	if err != nil {
		return result{}, err
	}
	defer pool.Close()
	client, err := riverClient(pool, workers, tx)
	if err != nil {
		return result{}, err
	}
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: jobs + 100,
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed}})
	defer unsubscribe()
	done := measure(ctx, pool)
	if err := client.Start(ctx); err != nil {
		return result{}, err
	}
	for done := 0; done < jobs; {
		e := <-events
		if e.Kind == river.EventKindJobCompleted {
			done++
		} else {
			log.Printf("river: job %d failed", e.Job.ID)
		}
	}
	var r result
	done(&r)
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return result{}, err
	}
	r.OK, err = verify(ctx, setup, "river", jobs)
	return r, err
}
