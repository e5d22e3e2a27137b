package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencelock/fencelock"
)

// errWrite is fn's own error in the tests of how Do, DoAll and RunJob
// combine it with theirs.
var errWrite = errors.New("write refused")

// checkOneLine fails unless err is on one line, says the loss at most once,
// and matches every one of wants.
func checkOneLine(t *testing.T, what string, err error, wants ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: nil error", what)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("%s: error on more than one line: %q", what, msg)
	}
	if n := strings.Count(msg, "lock lost"); n > 1 {
		t.Errorf("%s: the loss said %d times in %q", what, n, msg)
	}
	for _, want := range wants {
		if !errors.Is(err, want) {
			t.Errorf("%s: %q does not match %v", what, msg, want)
		}
	}
}

// When the lock is lost while fn runs, Do, DoAll and RunJob return fn's
// error and the loss as one error, on one line, each said once, matching
// both: whether fn returns the loss itself (its context's cause), wraps
// it, or returns an error of its own.
func TestRunErrorsOneLine(t *testing.T) {
	fns := []struct {
		name string
		ret  func(ctx context.Context) error
		want []error
	}{
		{"cause", func(ctx context.Context) error { return context.Cause(ctx) }, nil},
		{"wrapped cause", func(ctx context.Context) error { return fmt.Errorf("write: %w", context.Cause(ctx)) }, nil},
		{"formatted cause", func(ctx context.Context) error { return fmt.Errorf("write: %v", context.Cause(ctx)) }, nil},
		{"own error", func(context.Context) error { return errWrite }, []error{errWrite}},
		{"own error joined", func(ctx context.Context) error { return errors.Join(errWrite, ctx.Err()) }, []error{errWrite, context.Canceled}},
		{"nil", func(context.Context) error { return nil }, nil},
	}
	for _, fnc := range fns {
		t.Run("Do/"+fnc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := tmNewEnv(t)
				c := e.client("c")
				err := c.Do(context.Background(), "k", 30*time.Second, func(ctx context.Context, _ *fencelock.Lock) error {
					e.b.Delete(tmNS, "k")
					<-ctx.Done()
					return fnc.ret(ctx)
				})
				checkOneLine(t, "Do", err, append(fnc.want, fencelock.ErrLost)...)
				if !strings.HasPrefix(err.Error(), `fencelock: do "k": `) {
					t.Errorf("Do: %q does not begin with the call and key", err)
				}
			})
		})
		t.Run("DoAll/"+fnc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := tmNewEnv(t)
				c := e.client("c")
				err := c.DoAll(context.Background(), []string{"a", "b"}, 30*time.Second, func(ctx context.Context, _ *fencelock.MultiLock) error {
					e.b.Delete(tmNS, "b")
					<-ctx.Done()
					return fnc.ret(ctx)
				})
				checkOneLine(t, "DoAll", err, append(fnc.want, fencelock.ErrLost)...)
			})
		})
		t.Run("RunJob/"+fnc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := tmNewEnv(t)
				c := e.client("c")
				job := fencelock.Job{Name: "j", LockAtMost: 2 * time.Second}
				ran, err := c.RunJob(context.Background(), job, time.Now(), func(ctx context.Context, _ *fencelock.Lock) error {
					<-ctx.Done() // the lease runs out
					return fnc.ret(ctx)
				})
				if !ran {
					t.Fatalf("RunJob did not run: %v", err)
				}
				checkOneLine(t, "RunJob", err, append(fnc.want, fencelock.ErrLost)...)
			})
		})
	}
}

// fn's error and the failure of the release that follows are one error on
// one line too, matching both.
func TestRunErrorReleaseFailedOneLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := tmNewEnv(t)
		c := e.client("c")
		err := c.DoAll(context.Background(), []string{"a", "b", "c"}, 30*time.Second, func(ctx context.Context, _ *fencelock.MultiLock) error {
			e.b.Delete(tmNS, "b") // found gone by the release, not by a renewal
			e.b.Delete(tmNS, "c")
			return errWrite
		})
		checkOneLine(t, "DoAll", err, errWrite, fencelock.ErrLost)

		m, err := c.AcquireAll(context.Background(), []string{"a", "b"}, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		e.b.Delete(tmNS, "a")
		e.b.Delete(tmNS, "b")
		err = m.Release(context.Background())
		checkOneLine(t, "MultiLock.Release", err, fencelock.ErrNotHeld)
		if !strings.Contains(err.Error(), `"a"`) || !strings.Contains(err.Error(), `"b"`) {
			t.Errorf("MultiLock.Release: %q does not name both keys", err)
		}

		// The errors of a lost Lock's calls are on one line too.
		lk, err := c.Acquire(context.Background(), "k", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		e.b.Delete(tmNS, "k")
		if err := lk.Refresh(context.Background(), 30*time.Second); err == nil {
			t.Fatal("Refresh of a deleted lock succeeded")
		}
		_, err = lk.TTL(context.Background())
		checkOneLine(t, "TTL after the loss", err, fencelock.ErrNotHeld, fencelock.ErrLost)
		err = lk.Release(context.Background())
		checkOneLine(t, "Release after the loss", err, fencelock.ErrNotHeld, fencelock.ErrLost)
		err = lk.Refresh(context.Background(), 30*time.Second)
		checkOneLine(t, "Refresh after the loss", err, fencelock.ErrNotHeld, fencelock.ErrLost)
	})
}

// Against Redis, as users run it: a lock deleted behind Do's back.
func TestRunErrorsOneLineRedis(t *testing.T) {
	t.Parallel()
	_, rdb := startRedis(t)
	c := newClient(t, rdb)
	ctx := ctxTimeout(t, 60*time.Second)
	err := c.Do(ctx, "k", 3*time.Second, func(fctx context.Context, _ *fencelock.Lock) error {
		if err := rdb.Del(ctx, "lock:{k}:lock").Err(); err != nil {
			t.Error(err)
		}
		<-fctx.Done() // the next renewal, within a second, finds it gone
		return fmt.Errorf("write: %w", context.Cause(fctx))
	})
	checkOneLine(t, "Do", err, fencelock.ErrLost)
	t.Logf("Do: %v", err)
}
