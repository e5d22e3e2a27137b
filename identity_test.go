package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/memorybackend"
)

// WithIdentity: the holder's identity is stored with the lock,
// on Redis and on the memory backend, and Inspect returns it (on Redis it
// reads the server, whichever Client asks); a Client without one stores
// nothing, and Inspect's Identity is empty.
func TestIdentity(t *testing.T) {
	_, rdb := startRedis(t)
	backends := map[string]func(opts ...fencelock.Option) *fencelock.Client{
		"redis": func(opts ...fencelock.Option) *fencelock.Client { return newClient(t, rdb, opts...) },
		"memory": func(opts ...fencelock.Option) *fencelock.Client {
			c := fencelock.New(memorybackend.New(), opts...)
			t.Cleanup(func() { c.Close() })
			return c
		},
	}
	for name, newC := range backends {
		t.Run(name, func(t *testing.T) {
			ctx := ctxTimeout(t, 10*time.Second)
			named := newC(fencelock.WithIdentity("billing-7 pid 4242"))
			anon := newC()

			lk, err := named.TryAcquire(ctx, "id:named", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			info, err := named.Inspect(ctx, "id:named")
			if err != nil || info.Identity != "billing-7 pid 4242" || info.Owner != lk.Token() {
				t.Fatalf("Inspect of a lock taken WithIdentity: %+v, %v", info, err)
			}
			// Re-entry and release keep and then drop it with the lock.
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if info, err := named.Inspect(ctx, "id:named"); err != nil || info.Held || info.Identity != "" {
				t.Fatalf("after release: %+v, %v", info, err)
			}

			// So is the identity of a fair acquisition: a single attempt
			// (no place in line), and a waiter's, granted by a release.
			lk, err = named.TryAcquire(ctx, "id:fair", time.Minute, fencelock.WithFairness())
			if err != nil {
				t.Fatal(err)
			}
			if info, err := named.Inspect(ctx, "id:fair"); err != nil || info.Identity != "billing-7 pid 4242" {
				t.Fatalf("Inspect of a lock taken by a fair TryAcquire WithIdentity: %+v, %v", info, err)
			}
			waited := make(chan *fencelock.Lock, 1)
			go func() {
				next, err := named.Acquire(ctx, "id:fair", time.Minute, fencelock.WithFairness())
				if err != nil {
					t.Error(err)
				}
				waited <- next
			}()
			if name == "redis" {
				waitUntil(t, 30*time.Second, "the waiter in line", func() bool {
					return rdb.ZCard(ctx, "lock:{id:fair}:queue").Val() == 1
				})
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if next := <-waited; next != nil {
				if info, err := named.Inspect(ctx, "id:fair"); err != nil || info.Identity != "billing-7 pid 4242" || info.Owner != next.Token() {
					t.Fatalf("Inspect of a lock a fair waiter WithIdentity got: %+v, %v", info, err)
				}
				next.Release(ctx)
			}

			lk, err = anon.TryAcquire(ctx, "id:anon", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			defer lk.Release(ctx)
			if info, err := anon.Inspect(ctx, "id:anon"); err != nil || !info.Held || info.Identity != "" {
				t.Fatalf("Inspect of a lock taken without identity: %+v, %v", info, err)
			}
			if name != "redis" {
				return
			}
			// On Redis, no field is written without an identity.
			fields, err := rdb.HKeys(ctx, "lock:{id:anon}:lock").Result()
			if err != nil || len(fields) == 0 || slices.Contains(fields, "id") {
				t.Errorf("fields of a lock taken without identity: %v, %v; want some, and no id", fields, err)
			}
		})
	}
}

// An identity that would garble a table or a log line is refused, naming
// the value, at Check and at every acquire.
func TestIdentityInvalid(t *testing.T) {
	for _, id := range []string{"a\nb", "tab\there", strings.Repeat("x", fencelock.MaxIdentityLen+1), "\xff"} {
		c := fencelock.New(memorybackend.New(), fencelock.WithIdentity(id))
		ctx := context.Background()
		err := c.Check(ctx)
		if !errors.Is(err, fencelock.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithIdentity") {
			t.Errorf("Check with identity %q: %v, want ErrInvalidArgument naming WithIdentity", id, err)
		}
		if _, err := c.TryAcquire(ctx, "k", time.Second); !errors.Is(err, fencelock.ErrInvalidArgument) {
			t.Errorf("TryAcquire with identity %q: %v, want ErrInvalidArgument", id, err)
		}
		c.Close()
	}
}

func TestDefaultIdentity(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	if got, want := fencelock.DefaultIdentity(), fmt.Sprintf("%s:%d", host, os.Getpid()); got != want {
		t.Errorf("DefaultIdentity() = %q, want %q", got, want)
	}
}
