package main

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/testing/servertest"
)

// Instances that start at once all migrate the same database: each step
// must be applied exactly once, and none may fail.
func TestMigrateConcurrently(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) (url, path string){
		"sqlite":   func(t *testing.T) (string, string) { return "", filepath.Join(t.TempDir(), "m.db") },
		"postgres": func(t *testing.T) (string, string) { return servertest.Postgres(t), "" },
	} {
		t.Run(name, func(t *testing.T) {
			url, path := open(t)
			ctx := context.Background()
			const instances = 6
			stores := make([]*Store, instances)
			for i := range stores {
				s, err := OpenStore(ctx, url, path)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				stores[i] = s
			}
			applied := make([][]string, instances)
			errs := make([]error, instances)
			var wg sync.WaitGroup
			for i, s := range stores {
				wg.Go(func() { applied[i], errs[i] = s.Migrate(ctx) })
			}
			wg.Wait()
			total := 0
			for i := range stores {
				if errs[i] != nil {
					t.Errorf("instance %d: %v", i, errs[i])
				}
				total += len(applied[i])
			}
			if total != len(migrations) {
				t.Errorf("%d migrations applied in all, want %d: %v", total, len(migrations), applied)
			}
			var n int
			if err := stores[0].db.QueryRow(`SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil || n != len(migrations) {
				t.Errorf("schema_migrations has %d rows (%v), want %d", n, err, len(migrations))
			}
			// Again: nothing to do.
			if again, err := stores[0].Migrate(ctx); err != nil || len(again) != 0 {
				t.Errorf("second migration: %v %v", again, err)
			}
			// The tables work, including the idempotency package's.
			p, err := stores[1].CreateProduct(ctx, "p", 1)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := stores[2].Idempotency().Get(ctx, orderScope, "x"); err != nil {
				t.Error(err)
			}
			if got, err := stores[3].Product(ctx, p.ID); err != nil || got.Stock != 1 {
				t.Errorf("product %+v (%v)", got, err)
			}
		})
	}
}
