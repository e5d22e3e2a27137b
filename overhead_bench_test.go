package fencelock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/memorybackend"
)

// BenchmarkClientOverhead measures what the Client itself costs per
// uncontended Acquire+Release with a request context, over the in-memory
// backend (no network): time and allocations of the Client's bookkeeping,
// against the backend's two calls alone ("backend"). Redis figures are in
// redisbackend's BenchmarkAcquireRelease.
func BenchmarkClientOverhead(b *testing.B) {
	be := memorybackend.New()
	c := fencelock.New(be)
	b.Cleanup(func() { c.Close() })
	const ttl = 10 * time.Second

	b.Run("backend", func(b *testing.B) {
		b.ReportAllocs()
		ref := driver.Ref{Key: "backend", Token: "token"}
		for b.Loop() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := be.Acquire(ctx, driver.Request{Ref: ref, Owner: ref.Token, TTL: ttl})
			if err == nil {
				_, err = be.Release(ctx, driver.ReleaseRequest{Ref: ref})
			}
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	cycle := func(key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		lk, err := c.Acquire(ctx, key, ttl)
		if err != nil {
			return err
		}
		return lk.Release(ctx)
	}
	b.Run("client", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := cycle("client"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("client-parallel64", func(b *testing.B) {
		b.ReportAllocs()
		var ids atomic.Int64
		b.SetParallelism(32) // × GOMAXPROCS 2 on the project's machine
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprint("parallel-", ids.Add(1))
			for pb.Next() {
				if err := cycle(key); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
