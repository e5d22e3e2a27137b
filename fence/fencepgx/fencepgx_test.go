package fencepgx_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/fence/fencepgx"
	"github.com/fencelock/fencelock/testing/leaktest"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/jackc/pgx/v5"
)

// TestMain stops the shared PostgreSQL after the tests, then checks that
// they left no goroutine running.
func TestMain(m *testing.M) {
	leaktest.Main(leaktest.Then(m, func(code int) int {
		servertest.ClosePostgres()
		return code
	}))
}

// Claim through pgx's own interface, in a pgx.Tx: a claim, a stale token
// refused, a missing row, and a SQLite table refused.
func TestClaim(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, servertest.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE stock (warehouse TEXT NOT NULL, sku TEXT NOT NULL, qty BIGINT NOT NULL,
		fence BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (warehouse, sku))`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO stock VALUES ('north', 'A-1', 3, 0)`); err != nil {
		t.Fatal(err)
	}
	tbl, err := fence.NewTable(fence.Postgres, "public.stock", "fence", "warehouse", "sku")
	if err != nil {
		t.Fatal(err)
	}
	write := func(tok int64, warehouse, sku string) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if err := fencepgx.Claim(ctx, tbl, tx, tok, warehouse, sku); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE stock SET qty = qty - 1 WHERE warehouse = $1 AND sku = $2`, warehouse, sku)
			return err
		})
	}
	if err := write(9, "north", "A-1"); err != nil {
		t.Fatal(err)
	}
	err = write(8, "north", "A-1")
	var stale *fence.StaleError
	if !errors.As(err, &stale) || stale.Current != 9 || stale.Resource != "public.stock(warehouse=north, sku=A-1)" {
		t.Fatalf("stale token through pgx: %v", err)
	}
	if err := write(10, "south", "A-1"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("missing row through pgx: %v", err)
	}
	var qty, f int64
	conn.QueryRow(ctx, `SELECT qty, fence FROM stock`).Scan(&qty, &f)
	if qty != 2 || f != 9 {
		t.Fatalf("qty %d fence %d, want 2 and 9", qty, f)
	}
	sqliteTbl, _ := fence.NewTable(fence.SQLite, "stock", "fence", "warehouse", "sku")
	if err := fencepgx.Claim(ctx, sqliteTbl, conn, 1, "north", "A-1"); err == nil {
		t.Fatal("a claim on a SQLite table accepted")
	}
}
