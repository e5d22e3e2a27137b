package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/fence"
)

// tableDBs returns a fresh SQLite file and a fresh PostgreSQL database,
// each with a products table of the kind a service has, fence column
// included, and products 1 and 2 (stock 10).
func tableDBs(t *testing.T) map[string]*sql.DB {
	dbs := map[string]*sql.DB{"sqlite": sqliteDB(t), "postgres": postgresDB(t)}
	for _, db := range dbs {
		for _, stmt := range []string{
			`CREATE TABLE products (id BIGINT PRIMARY KEY, stock BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)`,
			`INSERT INTO products (id, stock) VALUES (1, 10), (2, 10)`,
			`CREATE TABLE claim_log (seq INTEGER NOT NULL, token BIGINT NOT NULL)`,
		} {
			if _, err := db.Exec(stmt); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dbs
}

func dialect(name string) fence.Dialect {
	if name == "postgres" {
		return fence.Postgres
	}
	return fence.SQLite
}

func productFence(t *testing.T, db *sql.DB, id int64) (stock, f int64) {
	t.Helper()
	if err := db.QueryRow(`SELECT stock, fence FROM products WHERE id = `+fmt.Sprint(id)).Scan(&stock, &f); err != nil {
		t.Fatal(err)
	}
	return stock, f
}

// deduct is a business write fenced by Claim: claim the product row, then
// take one item, in one transaction.
func deduct(ctx context.Context, db *sql.DB, tbl *fence.Table, d fence.Dialect, id, token int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := tbl.Claim(ctx, tx, token, id); err != nil {
		return err
	}
	q := `UPDATE products SET stock = stock - 1 WHERE id = $1`
	if d == fence.SQLite {
		q = `UPDATE products SET stock = stock - 1 WHERE id = ?`
	}
	if _, err := tx.ExecContext(ctx, q, id); err != nil {
		return err
	}
	return tx.Commit()
}

// Claim inside the caller's transaction: a first and an equal token write,
// a lower one is refused with a *StaleError naming the row and both tokens
// and writes nothing, a missing row is ErrNotFound, a rolled-back claim
// leaves the fence as it was.
func TestTableClaim(t *testing.T) {
	for name, db := range tableDBs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			d := dialect(name)
			tbl, err := fence.NewTable(d, "products", "fence", "id")
			if err != nil {
				t.Fatal(err)
			}
			for _, tok := range []int64{5, 5, 7} {
				if err := deduct(ctx, db, tbl, d, 1, tok); err != nil {
					t.Fatalf("token %d: %v", tok, err)
				}
			}
			err = deduct(ctx, db, tbl, d, 1, 6)
			var stale *fence.StaleError
			if !errors.Is(err, fence.ErrStale) || !errors.As(err, &stale) || stale.Token != 6 || stale.Current != 7 ||
				stale.Resource != "products(id=1)" {
				t.Fatalf("stale token 6 after 7: %v", err)
			}
			if stock, f := productFence(t, db, 1); stock != 7 || f != 7 {
				t.Fatalf("after a refused write: stock %d fence %d, want 7 and 7", stock, f)
			}
			if err := deduct(ctx, db, tbl, d, 99, 8); !errors.Is(err, fence.ErrNotFound) || !strings.Contains(err.Error(), "products(id=99)") {
				t.Fatalf("missing row: %v", err)
			}

			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := tbl.Claim(ctx, tx, 100, int64(2)); err != nil {
				t.Fatal(err)
			}
			tx.Rollback()
			if _, f := productFence(t, db, 2); f != 0 {
				t.Fatalf("fence %d after a rolled-back claim, want 0", f)
			}
		})
	}
}

// Concurrent holders with random tokens: the claims that commit do so in
// increasing token order (a stale one never commits after a newer one),
// and the row ends with the largest token that committed.
func TestTableConcurrentClaims(t *testing.T) {
	for name, db := range tableDBs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			d := dialect(name)
			tbl, err := fence.NewTable(d, "products", "fence", "id")
			if err != nil {
				t.Fatal(err)
			}
			logQ := `INSERT INTO claim_log (seq, token) VALUES ((SELECT COUNT(*) FROM claim_log), $1)`
			if d == fence.SQLite {
				logQ = strings.Replace(logQ, "$1", "?", 1)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			committed, refused := 0, 0
			for _, tok := range rand.Perm(40) {
				wg.Go(func() {
					err := func() error {
						tx, err := db.BeginTx(ctx, nil)
						if err != nil {
							return err
						}
						defer tx.Rollback()
						if err := tbl.Claim(ctx, tx, int64(tok+1), 1); err != nil {
							return err
						}
						if _, err := tx.ExecContext(ctx, logQ, tok+1); err != nil {
							return err
						}
						return tx.Commit()
					}()
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						committed++
					case errors.Is(err, fence.ErrStale):
						refused++
					default:
						t.Error(err)
					}
				})
			}
			wg.Wait()
			rows, err := db.Query(`SELECT token FROM claim_log ORDER BY seq`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var last, n int64
			for rows.Next() {
				var tok int64
				rows.Scan(&tok)
				if tok < last {
					t.Fatalf("token %d committed after %d", tok, last)
				}
				last, n = tok, n+1
			}
			if _, f := productFence(t, db, 1); f != last || n != int64(committed) || committed+refused != 40 {
				t.Fatalf("fence %d, last committed %d, %d logged, %d committed, %d refused", f, last, n, committed, refused)
			}
			t.Logf("%d committed in token order, %d refused as stale", committed, refused)
		})
	}
}

// Names that need quoting work (a reserved word, a quote in a name);
// names no database can hold, bad tokens and keys of the wrong arity are
// refused with errors naming them.
func TestTableNames(t *testing.T) {
	for name, db := range tableDBs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			d := dialect(name)
			if _, err := db.Exec(`CREATE TABLE "order" ("the""id" BIGINT PRIMARY KEY, "select" BIGINT NOT NULL DEFAULT 0)`); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(`INSERT INTO "order" ("the""id") VALUES (1)`); err != nil {
				t.Fatal(err)
			}
			tbl, err := fence.NewTable(d, "order", "select", `the"id`)
			if err != nil {
				t.Fatal(err)
			}
			if err := tbl.Claim(ctx, db, 3, 1); err != nil {
				t.Fatal(err)
			}
			if err := tbl.Claim(ctx, db, 2, 1); !errors.Is(err, fence.ErrStale) {
				t.Fatalf("stale claim on a quoted table: %v", err)
			}
			for _, tc := range []struct {
				table, fenceCol string
				keys            []string
				mention         string
			}{
				{"", "fence", []string{"id"}, `invalid table name ""`},
				{"shop.", "fence", []string{"id"}, `invalid table name "shop."`},
				{"pro\x00ducts", "fence", []string{"id"}, "NUL"},
				{"products", "", []string{"id"}, `invalid fence column ""`},
				{"products", "fence", nil, "invalid key columns"},
				{"products", "fence", []string{"\xff"}, "not valid UTF-8"},
				{"products", strings.Repeat("f", 64), []string{"id"}, "longer than 63 bytes"},
			} {
				if _, err := fence.NewTable(d, tc.table, tc.fenceCol, tc.keys...); err == nil || !strings.Contains(err.Error(), tc.mention) {
					t.Errorf("NewTable(%q, %q, %q): %v, want an error mentioning %s", tc.table, tc.fenceCol, tc.keys, err, tc.mention)
				}
			}
			if _, err := fence.NewTable(fence.Dialect(7), "products", "fence", "id"); err == nil {
				t.Error("bad dialect accepted")
			}
			if err := tbl.Claim(ctx, db, 0, 1); err == nil || !strings.Contains(err.Error(), "invalid token 0") {
				t.Errorf("token 0: %v", err)
			}
			if err := tbl.Claim(ctx, db, 5, 1, 2); err == nil || !strings.Contains(err.Error(), "1 key column") {
				t.Errorf("two key values for one column: %v", err)
			}
		})
	}
}
