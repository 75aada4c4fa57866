package concurrency

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
)

// TxBeginner begins transactions: *pgxpool.Pool and *pgx.Conn implement it.
type TxBeginner interface {
	BeginTx(ctx context.Context, txOptions pgx.TxOptions) (pgx.Tx, error)
}

// TxOptions configure RunInTx.
type TxOptions struct {
	// TxOptions are the transaction's options (isolation level, access
	// mode, deferrable), as pgx takes them.
	pgx.TxOptions
	// MaxAttempts is how many times the transaction runs at most; default 5.
	MaxAttempts int
	// BaseDelay is the backoff before the second attempt; it doubles with
	// each further attempt up to MaxDelay, each pause drawn at random
	// between half of it and all of it. Defaults: 10 ms and 1 s.
	BaseDelay, MaxDelay time.Duration
	// OnRetry, when set, is called with the attempt that failed (1 for the
	// first) and its error before the pause.
	OnRetry func(attempt int, err error)
}

// Retryable reports whether err is a serialization failure (40001) or a
// detected deadlock (40P01): the transaction can be run again from the start.
func Retryable(err error) bool {
	s := SQLState(err)
	return s == SQLStateSerializationFailure || s == SQLStateDeadlockDetected
}

// RunInTx runs fn in a transaction on db and commits it; when fn or the
// commit fails with SQLSTATE 40001 or 40P01 it rolls back, pauses (jittered
// exponential backoff) and runs fn again in a new transaction, up to
// opts.MaxAttempts times. fn must therefore be safe to run more than once
// (do only database work through tx in it). Any other error of fn rolls back
// and is returned as it is; the last retryable error is returned when the
// attempts are used up.
func RunInTx(ctx context.Context, db TxBeginner, opts TxOptions, fn func(pgx.Tx) error) error {
	attempts := opts.MaxAttempts
	if attempts <= 0 {
		attempts = 5
	}
	base, maxDelay := opts.BaseDelay, opts.MaxDelay
	if base <= 0 {
		base = 10 * time.Millisecond
	}
	if maxDelay <= 0 {
		maxDelay = time.Second
	}
	delay := base
	for attempt := 1; ; attempt++ {
		err := runOnce(ctx, db, opts.TxOptions, fn)
		if err == nil || !Retryable(err) || attempt >= attempts {
			return err
		}
		if opts.OnRetry != nil {
			opts.OnRetry(attempt, err)
		}
		pause := delay/2 + rand.N(delay/2+1)
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		}
		delay = min(2*delay, maxDelay)
	}
}

func runOnce(ctx context.Context, db TxBeginner, txOptions pgx.TxOptions, fn func(pgx.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, txOptions)
	if err != nil {
		return err
	}
	defer func() {
		p := recover()
		if err != nil || p != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = tx.Rollback(rctx)
		}
		if p != nil {
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
