package main

import (
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5"
)

type pgxTx = pgx.Tx

// quietLogger keeps River's warnings and errors (on stderr), not its
// informational records.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
