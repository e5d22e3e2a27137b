package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// The purge job deletes the idempotency records older than -keep-records,
// once per tick across instances: a second instance asking for the same
// tick does not run it. A purged request number creates a new order.
func TestPurgeRecords(t *testing.T) {
	for name, cfg := range testDatabases(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			cfg.KeepRecords = 24 * time.Hour
			app, ts, _ := newTestApp(t, cfg)
			other, _, _ := newTestApp(t, cfg) // a second instance on the same Redis and database
			p := createProduct(t, ts.URL, 10)
			for _, no := range []string{"OLD-1", "NEW-1"} {
				if r := call(t, "POST", ts.URL+"/api/orders", fmt.Sprintf(`{"requestNo":%q,"productId":%d,"count":1}`, no, p.ID)); r.status != http.StatusCreated {
					t.Fatalf("%s: %d %s", no, r.status, r.body)
				}
			}
			// OLD-1's record was written two days ago.
			if _, err := app.store.db.ExecContext(ctx, app.store.q(`UPDATE `+idempotencyTable+` SET updated_ms = updated_ms - $1 WHERE request_key = 'OLD-1'`),
				int64(48*time.Hour/time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			tick := time.Now().Truncate(purgeJob.Period)
			ran, deleted, err := app.purgeOnce(ctx, tick)
			if err != nil || !ran || deleted != 1 {
				t.Fatalf("purge: ran %v, deleted %d, %v; want 1 record deleted", ran, deleted, err)
			}
			if ran, _, err := other.purgeOnce(ctx, tick); ran || err != nil {
				t.Errorf("the same tick on another instance: ran %v (%v), want skipped", ran, err)
			}
			for no, want := range map[string]bool{"OLD-1": false, "NEW-1": true} {
				if _, found, err := app.store.Idempotency().Get(ctx, orderScope, no); err != nil || found != want {
					t.Errorf("record %s after the purge: found %v (%v), want %v", no, found, err, want)
				}
			}
		})
	}
}

// -keep-records is 0 (keep) or at least an hour.
func TestKeepRecordsFlag(t *testing.T) {
	env := func(string) string { return "" }
	for _, v := range []string{"0", "1h", "720h"} {
		if _, err := parseConfig([]string{"-keep-records", v}, env, nil); err != nil {
			t.Errorf("-keep-records %s: %v", v, err)
		}
	}
	for _, v := range []string{"1m", "-1h"} {
		if _, err := parseConfig([]string{"-keep-records", v}, env, nil); err == nil {
			t.Errorf("-keep-records %s accepted", v)
		}
	}
}
