package etcdbackend_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Locks on a 3-member etcd cluster: the Client is the same as on Redis.
func Example() {
	// ETCD_ENDPOINTS lists your etcd members, comma-separated; empty
	// means localhost:2379.
	endpoints := strings.Split(cmp.Or(os.Getenv("ETCD_ENDPOINTS"), "localhost:2379"), ",")
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cli.Close()
	locks := fencelock.New(etcdbackend.New(cli), fencelock.WithNamespace("example"))
	defer locks.Close()
	ctx := context.Background()

	err = locks.Do(ctx, "invoice:42", 10*time.Second, func(ctx context.Context, lk *fencelock.Lock) error {
		// Another process is refused while this one holds the lock.
		_, err := locks.TryAcquire(ctx, "invoice:42", 10*time.Second)
		fmt.Println("while held:", errors.Is(err, fencelock.ErrNotAcquired))
		fmt.Println("fence is an etcd revision:", lk.Fence() > 0)
		return nil
	})
	fmt.Println("done:", err)
	// Output:
	// while held: true
	// fence is an etcd revision: true
	// done: <nil>
}

// A ttl below etcd's minimum lease (or not a whole number of seconds) is
// rounded up: the lock's local deadline counts from the lease etcd granted.
func Example_ttlRounding() {
	// ETCD_ENDPOINTS lists your etcd members, comma-separated; empty
	// means localhost:2379.
	endpoints := strings.Split(cmp.Or(os.Getenv("ETCD_ENDPOINTS"), "localhost:2379"), ",")
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cli.Close()
	locks := fencelock.New(etcdbackend.New(cli), fencelock.WithNamespace("example"))
	defer locks.Close()
	ctx := context.Background()

	start := time.Now()
	lk, err := locks.TryAcquire(ctx, "short", 300*time.Millisecond)
	if err != nil {
		fmt.Println(err)
		return
	}
	// The test cluster's minimum lease is 2 s; the local deadline is that,
	// less the 10% safety margin.
	fmt.Println("deadline after more than 1.5s:", lk.Deadline().Sub(start) > 1500*time.Millisecond)
	if err := lk.Release(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// deadline after more than 1.5s: true
}
