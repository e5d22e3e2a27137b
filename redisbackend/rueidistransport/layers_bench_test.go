package rueidistransport_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/testing/servertest"
	"github.com/redis/rueidis"
)

// benchTTL is the lease of the benchmarks' locks: far longer than a cycle,
// so that none lapses while held.
const benchTTL = 10 * time.Second

// BenchmarkLayers measures one uncontended acquire and release through the
// rueidis transport, a layer at a time, on one rueidis client and one
// private redis-server, as redisbackend's BenchmarkLayers does on go-redis:
//
//   - ping: two PINGs, the round trips any lock needs;
//   - backend: fencelock's Redis backend called directly (Acquire and
//     Release of the store: its scripts, key names, arguments and replies);
//   - client: Client.Acquire and Lock.Release, what users call.
//
// Each layer runs serially (one cycle at a time, one key) and in parallel
// (b.RunParallel, a key per goroutine, so that no cycle waits for
// another's; rueidis pipelines the goroutines' commands on its shared
// connection). An op is one cycle, acquire and release, each under a fresh
// request context (context.WithTimeout, 10 s), as in an HTTP handler; the
// allocations are the process's, rueidis's reader and writer included. No
// time is asserted; take a few runs (-count 3), e.g.
//
//	go test -run '^$' -bench Layers -benchtime 20000x -count 3 ./redisbackend/rueidistransport
func BenchmarkLayers(b *testing.B) {
	srv := servertest.Redis(b)
	client := newRueidis(b, rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	backend := newBackend(b, client)
	locks := fencelock.New(backend)
	b.Cleanup(func() { locks.Close() })

	var tokens atomic.Int64 // tokens and keys unique across goroutines
	next := func(prefix string) string { return prefix + strconv.FormatInt(tokens.Add(1), 10) }
	// step runs f under a fresh request context.
	step := func(b *testing.B, f func(ctx context.Context) error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := f(ctx); err != nil {
			b.Error(err)
		}
	}
	// A layer's cycle on key: an acquire and a release.
	layers := []struct {
		name  string
		cycle func(b *testing.B, key string)
	}{
		{"ping", func(b *testing.B, _ string) {
			ping := func(ctx context.Context) error { return client.Do(ctx, client.B().Ping().Build()).Error() }
			step(b, ping)
			step(b, ping)
		}},
		{"backend", func(b *testing.B, key string) {
			ref := driver.Ref{Key: key, Token: next("token-")}
			step(b, func(ctx context.Context) error {
				_, err := backend.Acquire(ctx, driver.Request{Ref: ref, Owner: ref.Token, TTL: benchTTL})
				return err
			})
			step(b, func(ctx context.Context) error {
				_, err := backend.Release(ctx, driver.ReleaseRequest{Ref: ref})
				return err
			})
		}},
		{"client", func(b *testing.B, key string) {
			var lk *fencelock.Lock
			step(b, func(ctx context.Context) (err error) {
				lk, err = locks.Acquire(ctx, key, benchTTL)
				return err
			})
			if lk != nil {
				step(b, lk.Release)
			}
		}},
	}
	for _, l := range layers {
		b.Run(l.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			key := next(l.name + "-serial-")
			for b.Loop() {
				l.cycle(b, key)
			}
		})
		b.Run(l.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				key := next(l.name + "-parallel-")
				for pb.Next() {
					l.cycle(b, key)
				}
			})
		})
	}
}
