package fencelock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/memorybackend"
)

// reenteringInspector is the memory backend whose every inspection is
// followed by reenter: the holder takes the lock again, under its fence,
// after ForceRelease looked and before it releases what it saw.
type reenteringInspector struct {
	*memorybackend.Backend
	reenter func()
}

func (r *reenteringInspector) InspectLock(ctx context.Context, namespace, key string) (fencelock.LockInfo, error) {
	info, err := r.Backend.InspectLock(ctx, namespace, key)
	r.reenter()
	return info, err
}

// A holder that re-enters its lock faster than ForceRelease can free it
// keeps it: ForceRelease gives up after its rounds with ErrNotAcquired, and
// logs that error with what it released.
func TestForceReleaseGivesUpOnEndlessReentry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := memorybackend.New()
		t.Cleanup(func() { b.Close() })
		holder := fencelock.New(b)
		ctx := context.Background()
		octx := fencelock.WithOwner(ctx, "job-7")
		outer, err := holder.TryAcquire(octx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		reentries := 0
		ri := &reenteringInspector{Backend: b, reenter: func() {
			lk, err := holder.TryAcquire(octx, "k", time.Minute)
			if err != nil {
				t.Errorf("re-entry: %v", err)
				return
			}
			if lk.Fence() != outer.Fence() {
				t.Errorf("re-entry with fence %d, want the holder's %d", lk.Fence(), outer.Fence())
			}
			reentries++
		}}
		var logs bytes.Buffer
		admin := fencelock.New(ri, fencelock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		t.Cleanup(func() { holder.Close(); admin.Close() })

		before, err := admin.ForceRelease(ctx, "k", "stuck")
		if !errors.Is(err, fencelock.ErrNotAcquired) || !strings.Contains(err.Error(), "re-entered") {
			t.Fatalf("ForceRelease against endless re-entries: %v, want ErrNotAcquired (re-entered in every round)", err)
		}
		if !before.Held || before.Fence != outer.Fence() {
			t.Fatalf("state before: %+v, want the holder's (fence %d)", before, outer.Fence())
		}
		if reentries < 2 {
			t.Fatalf("%d re-entries, want one per look", reentries)
		}
		if st := b.State(fencelock.DefaultNamespace, "k"); !st.Held() {
			t.Fatalf("after ForceRelease: %+v, want still held by the last re-entry", st)
		}
		done := logs.String()
		if !strings.Contains(done, "force released") || !strings.Contains(done, "err=") || !strings.Contains(done, "released=") {
			t.Fatalf("log %q, want the force released line with what was released and the error", done)
		}
	})
}
