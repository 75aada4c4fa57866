package main

// Row (g): enqueue-to-start latency with an idle worker.

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/riverqueue/river"

	concurrency "github.com/concurrency-ext/concurrency-ext/clients/go"
)

// latencyPause is the time the worker is left idle before each sample (and
// after it starts), so that each sample finds it waiting.
const latencyPause = 5 * time.Millisecond

type latencyArgs struct{}

func (latencyArgs) Kind() string { return "peer_latency" }

type latencyWorker struct {
	river.WorkerDefaults[latencyArgs]
	started chan time.Time
}

func (w *latencyWorker) Work(context.Context, *river.Job[latencyArgs]) error {
	w.started <- time.Now()
	return nil
}

// latencyRun starts an idle worker of the side (one handler), then samples
// times: the time from the call that enqueues one job (in a transaction of
// its own) to its handler's start. The result's P50ms and P99ms are filled
// in; Seconds is the whole run's.
func latencyRun(ctx context.Context, side string, samples int) (result, error) {
	setup, err := newPool(ctx, 2)
	if err != nil {
		return result{}, err
	}
	defer setup.Close()
	if err := reset(ctx, setup, false); err != nil {
		return result{}, err
	}
	pool, err := newPool(ctx, 3)
	if err != nil {
		return result{}, err
	}
	defer pool.Close()
	started := make(chan time.Time, 1)
	var enqueue func() error
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped := make(chan error, 1)
	switch side {
	case "runtime":
		w := concurrency.NewWorker(pool, concurrency.WorkerConfig{Name: "peers"})
		w.Handle("peers", func(context.Context, *concurrency.Task) error {
			started <- time.Now()
			return nil
		})
		go func() { stopped <- w.Run(runCtx) }()
		enqueue = func() error { _, err := concurrency.Enqueue(ctx, setup, "peers", map[string]int{}); return err }
	case "river", "river-one-client":
		ws := river.NewWorkers()
		river.AddWorker(ws, &latencyWorker{started: started})
		client, err := river.NewClient(riverDriver(pool), &river.Config{
			Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
			Workers:           ws,
			FetchCooldown:     time.Millisecond,
			FetchPollInterval: 20 * time.Millisecond,
			Logger:            quietLogger(),
		})
		if err != nil {
			return result{}, err
		}
		if err := client.Start(ctx); err != nil {
			return result{}, err
		}
		go func() {
			<-runCtx.Done()
			stopCtx, c := context.WithTimeout(ctx, 10*time.Second)
			defer c()
			stopped <- client.Stop(stopCtx)
		}()
		// river: the producer is a client of its own, as an application's web
		// process would be; river-one-client: the worker's client inserts,
		// which River tells its own fetcher in the process
		producer := client
		if side == "river" {
			if producer, err = river.NewClient(riverDriver(setup), &river.Config{Logger: quietLogger()}); err != nil {
				return result{}, err
			}
		}
		enqueue = func() error { _, err := producer.Insert(ctx, latencyArgs{}, nil); return err }
	default:
		return result{}, fmt.Errorf("row (g) has no side %q", side)
	}
	time.Sleep(300 * time.Millisecond) // started, idle, waiting
	done := measure(ctx, setup)
	ms := make([]float64, 0, samples)
	for range samples {
		t0 := time.Now()
		if err := enqueue(); err != nil {
			return result{}, err
		}
		select {
		case t := <-started:
			ms = append(ms, float64(t.Sub(t0).Microseconds())/1000)
		case <-time.After(10 * time.Second):
			return result{}, fmt.Errorf("%s: a job was not started within 10 s", side)
		}
		time.Sleep(latencyPause)
	}
	var r result
	done(&r)
	cancel()
	if err := <-stopped; err != nil && err != context.Canceled {
		return result{}, err
	}
	sort.Float64s(ms)
	r.P50ms, r.P99ms = ms[len(ms)/2], ms[min(len(ms)-1, len(ms)*99/100)]
	r.OK = len(ms) == samples
	return r, nil
}
