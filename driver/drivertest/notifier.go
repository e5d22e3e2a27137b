package drivertest

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/driver"
)

// The checks of driver.Notifier.
func init() {
	checks = append(checks, []check{
		{"ReleaseNotification", releaseNotification, has[driver.Notifier]},
		{"ReleaseNotificationNotify", releaseNotificationNotify, has[driver.Notifier]},
		{"ChangeNotification", changeNotification, has[driver.Notifier]},
		{"WatchTurnWithoutLinesRefused", watchTurnWithoutLines, all(has[driver.Notifier], lacks[driver.Lines])},
	}...)
}

// watch registers for the releases of key's holds of kind s.k.
func (s *suite) watch(ctx context.Context, key string) *driver.Watch {
	s.t.Helper()
	w, err := capability[driver.Notifier](s).Watch(ctx, driver.WatchRequest{Ref: s.ref(key, "")})
	if err != nil {
		s.t.Fatalf("Watch(%v %s): %v", s.k, key, err)
	}
	s.t.Cleanup(w.Stop)
	return w
}

// awaitNotification fails unless w is woken within 10s of after.
func (s *suite) awaitNotification(w *driver.Watch, after string) {
	s.t.Helper()
	select {
	case <-w.C:
	case <-time.After(10 * time.Second):
		s.t.Fatalf("no notification within 10s of %s", after)
	}
}

// checkNotified watches key, runs refuse (an acquire that must be
// refused), releases holder's hold and expects a notification.
func (s *suite) checkNotified(ctx context.Context, key, holder string, refuse func()) {
	s.t.Helper()
	w := s.watch(ctx, key)
	defer w.Stop()
	refuse()
	if res := s.release(ctx, key, holder); !res.Held {
		s.t.Fatalf("release: %+v", res)
	}
	s.awaitNotification(w, "a release that a refused acquire waited for")
}

// A release that frees the lock wakes its watchers when an acquire was
// refused while it was held (a waiter, as the Client's).
func releaseNotification(ctx context.Context, s *suite) {
	s.acquire(ctx, "k", "a", "", 30*time.Second)
	s.checkNotified(ctx, "k", "a", func() {
		if res := s.acquire(ctx, "k", "b", "", 30*time.Second); res.Acquired {
			s.t.Fatal("second token acquired a held lock")
		}
	})
}

// A release with Notify wakes the watchers although no acquire was refused
// while the lock was held (an election's observers watch without waiting).
func releaseNotificationNotify(ctx context.Context, s *suite) {
	s.acquire(ctx, "k", "a", "", 30*time.Second)
	w := s.watch(ctx, "k")
	res, err := s.st.Release(ctx, driver.ReleaseRequest{Ref: s.ref("k", "a"), Notify: true})
	if err != nil || !res.Held {
		s.t.Fatalf("Release with Notify: %+v, %v", res, err)
	}
	s.awaitNotification(w, "a release with Notify")
}

// An acquisition with Notify wakes the lock's change watchers (an election's
// observers learn of a new leader), and so does a release with Notify.
func changeNotification(ctx context.Context, s *suite) {
	w, err := capability[driver.Notifier](s).Watch(ctx, driver.WatchRequest{Ref: s.ref("k", ""), Changes: true})
	if err != nil {
		s.t.Fatalf("Watch(k, Changes): %v", err)
	}
	defer w.Stop()
	req := s.request("k", "a", 30*time.Second)
	req.Notify = true
	if res := s.acquireReq(ctx, req); !res.Acquired {
		s.t.Fatalf("Acquire with Notify of a free lock: %+v", res)
	}
	s.awaitNotification(w, "an acquisition with Notify")
	rel, err := s.st.Release(ctx, driver.ReleaseRequest{Ref: s.ref("k", "a"), Notify: true})
	if err != nil || !rel.Held {
		s.t.Fatalf("Release with Notify: %+v, %v", rel, err)
	}
	s.awaitNotification(w, "a release with Notify")
}

// A store without a line of waiters has no turn to watch.
func watchTurnWithoutLines(ctx context.Context, s *suite) {
	_, err := capability[driver.Notifier](s).Watch(ctx, driver.WatchRequest{Ref: s.ref("k", "waiter")})
	s.unsupported("Watch of a waiter's turn without Lines", err)
}
