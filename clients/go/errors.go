package concurrency

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATE codes the runtime treats specially.
const (
	// SQLStateLeaseLost is raised by heartbeat, complete, fail and release
	// when the task is no longer held under the caller's lease token.
	SQLStateLeaseLost = sqlStateLeaseLost
	// SQLStateSerializationFailure is retried by RunInTx.
	SQLStateSerializationFailure = sqlStateSerializationFailure
	// SQLStateDeadlockDetected is retried by RunInTx.
	SQLStateDeadlockDetected = sqlStateDeadlockDetected
)

// ErrLeaseLost matches (errors.Is) every error with SQLSTATE CE001: the task
// is not held under the caller's lease any more (it was reclaimed after the
// lease expired, cancelled, completed or released). Whatever the handler
// wrote in the completing transaction is rolled back.
var ErrLeaseLost = errors.New("concurrency: lease lost (SQLSTATE CE001)")

// ErrShutdownTimeout is returned by Worker.Run when handlers were still
// running at the end of the shutdown timeout; their contexts are cancelled
// and their leases lapse (the tasks come back after the lease).
var ErrShutdownTimeout = errors.New("concurrency: handlers still running at the shutdown timeout")

// Error is a server error of a concurrency_ext call. It wraps the
// *pgconn.PgError (errors.As reaches it) and matches ErrLeaseLost when its
// SQLSTATE is CE001.
type Error struct {
	// Op is the call that failed, e.g. "complete".
	Op string
	// SQLState is the five-character SQLSTATE, e.g. "42501".
	SQLState string
	// Message, Detail and Hint are the server's.
	Message, Detail, Hint string
	// PgErr is the driver's error.
	PgErr *pgconn.PgError
}

// Error returns "concurrency: <op>: <message> (SQLSTATE <code>)", with the
// server's DETAIL when there is one.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "concurrency: %s: %s (SQLSTATE %s)", e.Op, e.Message, e.SQLState)
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap returns the *pgconn.PgError.
func (e *Error) Unwrap() error { return e.PgErr }

// Is reports whether target is ErrLeaseLost and the SQLSTATE is CE001.
func (e *Error) Is(target error) bool {
	return target == ErrLeaseLost && e.SQLState == SQLStateLeaseLost
}

// LeaseLostReason says, for a CE001 error, what the server's DETAIL says
// became of the task: "cancelled", "completed", "reclaimed" (claimed again
// under another lease), "unleased" (ready again or dead) or "gone". It is ""
// for other errors.
func (e *Error) LeaseLostReason() string {
	if e.SQLState != SQLStateLeaseLost {
		return ""
	}
	for _, r := range leaseLostPatterns {
		if r.pattern.MatchString(e.Detail) {
			return r.reason
		}
	}
	return "gone"
}

// leaseLostPatterns are leaseLostReasons (clients/protocol) compiled.
var leaseLostPatterns = func() []struct {
	reason  string
	pattern *regexp.Regexp
} {
	out := make([]struct {
		reason  string
		pattern *regexp.Regexp
	}, len(leaseLostReasons))
	for i, r := range leaseLostReasons {
		out[i].reason, out[i].pattern = r[0], regexp.MustCompile(r[1])
	}
	return out
}()

// SQLState returns the SQLSTATE of err (an *Error or anything wrapping a
// *pgconn.PgError), or "" when err carries none.
func SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// wrap turns a driver error into an *Error (server errors) or annotates it
// with the operation (others). nil stays nil.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var own *Error
	if errors.As(err, &own) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return &Error{Op: op, SQLState: pgErr.Code, Message: pgErr.Message, Detail: pgErr.Detail,
			Hint: pgErr.Hint, PgErr: pgErr}
	}
	return fmt.Errorf("concurrency: %s: %w", op, err)
}
