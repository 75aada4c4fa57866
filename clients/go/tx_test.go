package concurrency

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestRunInTxRetriesASerializationFailure(t *testing.T) {
	pool := testPool(t, 6)
	ctx := context.Background()
	mustExec(t, pool, "CREATE TABLE IF NOT EXISTS on_call (doctor text PRIMARY KEY, on_call boolean NOT NULL)")
	mustExec(t, pool, "TRUNCATE on_call")
	mustExec(t, pool, "INSERT INTO on_call VALUES ('alice', true), ('bob', true)")

	// write skew under SERIALIZABLE: both read that two are on call, each
	// takes a different one off; one commit fails with 40001 and its retry
	// sees the other's write
	var both sync.WaitGroup
	both.Add(2)
	var mu sync.Mutex
	attempts := map[string]int{}
	leave := func(doctor string) error {
		first := true
		return RunInTx(ctx, pool, TxOptions{TxOptions: pgx.TxOptions{IsoLevel: pgx.Serializable}, BaseDelay: 5 * time.Millisecond},
			func(tx pgx.Tx) error {
				mu.Lock()
				attempts[doctor]++
				mu.Unlock()
				var n int
				if err := tx.QueryRow(ctx, "SELECT count(*) FROM on_call WHERE on_call").Scan(&n); err != nil {
					return err
				}
				if first {
					first = false
					both.Done()
					both.Wait() // both have read
				}
				if n < 2 {
					return nil // the last one on call stays
				}
				_, err := tx.Exec(ctx, "UPDATE on_call SET on_call = false WHERE doctor = $1", doctor)
				return err
			})
	}
	errs := make(chan error, 2)
	for _, d := range []string{"alice", "bob"} {
		go func() { errs <- leave(d) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM on_call WHERE on_call"); n != 1 {
		t.Fatalf("%d on call, want 1", n)
	}
	if attempts["alice"]+attempts["bob"] != 3 {
		t.Fatalf("attempts %v, want one retry", attempts)
	}
}

func TestRunInTxGivesUpAndPassesOtherErrors(t *testing.T) {
	pool := testPool(t, 4)
	ctx := context.Background()
	var retried []int
	runs := 0
	err := RunInTx(ctx, pool, TxOptions{MaxAttempts: 3, BaseDelay: time.Millisecond,
		OnRetry: func(attempt int, err error) { retried = append(retried, attempt) }},
		func(tx pgx.Tx) error {
			runs++
			_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'deadlock' USING ERRCODE = '40P01'; END $$`)
			return err
		})
	if SQLState(err) != "40P01" || runs != 3 || len(retried) != 2 {
		t.Fatalf("err %v after %d runs, retried %v", err, runs, retried)
	}
	runs = 0
	boom := errors.New("not retried")
	err = RunInTx(ctx, pool, TxOptions{}, func(tx pgx.Tx) error { runs++; return boom })
	if err != boom || runs != 1 {
		t.Fatalf("err %v after %d runs", err, runs)
	}
	// what fn wrote is rolled back on an error
	mustExec(t, pool, "CREATE TABLE IF NOT EXISTS tx_rollback (id int)")
	mustExec(t, pool, "TRUNCATE tx_rollback")
	_ = RunInTx(ctx, pool, TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO tx_rollback VALUES (1)"); err != nil {
			return err
		}
		return boom
	})
	if n := count(t, pool, "SELECT count(*) FROM tx_rollback"); n != 0 {
		t.Fatalf("%d rows of a failed transaction", n)
	}
}
