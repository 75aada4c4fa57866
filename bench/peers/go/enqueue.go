package main

// Rows (d) and (e): enqueueing, one by one or in bulk.

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	concurrency "github.com/concurrency-ext/concurrency-ext/clients/go"
)

// enqueueRun enqueues jobs jobs (payload {"i": i}): one by one, each call a
// transaction of its own, or chunk a call with bulk. The runtime calls
// Enqueue / EnqueueBatch, river Client.Insert / Client.InsertMany,
// river-copy Client.InsertManyFast (bulk only).
func enqueueRun(ctx context.Context, setup *pgxpool.Pool, side string, jobs int, bulk bool) (result, error) {
	if err := reset(ctx, setup, false); err != nil {
		return result{}, err
	}
	pool, err := newPool(ctx, 2)
	if err != nil {
		return result{}, err
	}
	defer pool.Close()
	var client *river.Client[pgxTx]
	if side != "runtime" {
		if client, err = riverClient(pool, 1, false); err != nil {
			return result{}, err
		}
	}
	done := measure(ctx, pool)
	if bulk {
		err = enqueueBulk(ctx, pool, client, side, jobs)
	} else {
		err = enqueueSingle(ctx, pool, client, side, jobs)
	}
	if err != nil {
		return result{}, err
	}
	var r result
	done(&r)
	// every job there, each payload once
	var n, distinct int
	countSQL := `SELECT count(*), count(DISTINCT payload->'i') FROM concurrency."q_peers"`
	if side != "runtime" {
		countSQL = "SELECT count(*), count(DISTINCT args->'i') FROM river_job"
	}
	if err := setup.QueryRow(ctx, countSQL).Scan(&n, &distinct); err != nil {
		return result{}, err
	}
	r.OK = n == jobs && distinct == jobs
	if !r.OK {
		log.Printf("%s: %d jobs enqueued, %d distinct, not %d", side, n, distinct, jobs)
	}
	return r, nil
}

func enqueueSingle(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgxTx], side string, jobs int) error {
	for i := range jobs {
		var err error
		switch side {
		case "runtime":
			_, err = concurrency.Enqueue(ctx, pool, "peers", map[string]int{"i": i})
		case "river":
			_, err = client.Insert(ctx, peerArgs{I: i}, nil)
		default:
			return fmt.Errorf("row (d) has no side %q", side)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func enqueueBulk(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgxTx], side string, jobs int) error {
	for start := 0; start < jobs; start += chunk {
		end := min(jobs, start+chunk)
		var err error
		if side == "runtime" {
			payloads := make([]any, 0, end-start)
			for i := start; i < end; i++ {
				payloads = append(payloads, map[string]int{"i": i})
			}
			_, err = concurrency.EnqueueBatch(ctx, pool, "peers", payloads)
		} else {
			params := make([]river.InsertManyParams, 0, end-start)
			for i := start; i < end; i++ {
				params = append(params, river.InsertManyParams{Args: peerArgs{I: i}})
			}
			switch side {
			case "river":
				_, err = client.InsertMany(ctx, params)
			case "river-copy":
				_, err = client.InsertManyFast(ctx, params)
			default:
				return fmt.Errorf("row (e) has no side %q", side)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
