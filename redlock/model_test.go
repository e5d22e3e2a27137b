package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redlock"
	"github.com/fencelock/fencelock/testing/lockmodel"
)

// The model of every feature together (testing/lockmodel) on Redlock over
// 3 real masters, in real time: the operations Redlock supports (the plain
// lock, Do, RunJob, Campaign, releases by token; no semaphore, read-write
// lock, fair line or ForceRelease), a few hundred steps.
func TestModelRedlock(t *testing.T) {
	_, clients := masters(t, 3)
	lockmodel.Run(t, lockmodel.Target{
		Name: "redlock",
		NewStore: func(lockmodel.TB) lockmodel.Store {
			view := masterView{}
			for _, c := range clients {
				view = append(view, redisbackend.New(c))
			}
			return lockmodel.NewServerStore(lockmodel.ServerStore{
				NewBackend: func() driver.Store {
					b, err := redlock.New(clients)
					if err != nil {
						panic(err) // 3 masters: never
					}
					return b
				},
				Inspector: view,
				OnClose: func() {
					for _, b := range view {
						b.Close()
					}
				},
			})
		},
		Clients:  3,
		TTLs:     []time.Duration{500 * time.Millisecond, time.Second, 3 * time.Second},
		Waits:    []time.Duration{0, 50 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second},
		Advances: []time.Duration{time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond},
		Job:      fencelock.Job{Period: 2 * time.Second, LockAtLeast: 500 * time.Millisecond, LockAtMost: 1500 * time.Millisecond},
		Permits:  2,
		// A master's reply slowed by a busy machine past the 250ms node
		// timeout makes an attempt fail; a second is many of them.
		Tolerance: 2 * time.Second,
		Checks:    12,
		Steps:     30,
	})
}

// masterView reads a lock on every master: its holds are those of any
// master (a hold on a minority still keeps waiters out there), and its
// counter the sum of the masters' (it moves with every fence minted).
type masterView []*redisbackend.Backend

func (v masterView) InspectLock(ctx context.Context, namespace, key string) (fencelock.LockInfo, error) {
	var all fencelock.LockInfo
	seen := map[string]bool{}
	for _, b := range v {
		info, err := b.InspectLock(ctx, namespace, key)
		if err != nil {
			return fencelock.LockInfo{}, errors.Join(errors.New("masterView"), err)
		}
		all.LastFence += info.LastFence
		for _, h := range info.Holds {
			if !seen[h.Token] {
				seen[h.Token] = true
				all.Holds = append(all.Holds, h)
			}
		}
	}
	all.Held = len(all.Holds) > 0
	return all, nil
}
