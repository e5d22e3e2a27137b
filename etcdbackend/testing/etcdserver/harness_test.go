package etcdserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencelock/fencelock/etcdbackend/testing/etcdserver"
	"github.com/fencelock/fencelock/testing/leaktest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

// A 3-member cluster serves writes, keeps them across a kill -9 of its
// leader and a restart of that member, and elects a new leader meanwhile.
func TestClusterSurvivesLeaderKill(t *testing.T) {
	c := etcdserver.New(t, 3)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Kill(leader)
	var newLeader int
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if newLeader, err = c.Leader(ctx); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no new leader after killing member %d: %v", leader, err)
		case <-tick.C:
		}
	}
	if newLeader == leader {
		t.Fatalf("the killed member %d is still the leader", leader)
	}
	if _, err := cli.Put(ctx, "k", "v2"); err != nil {
		t.Fatalf("put after the leader was killed: %v", err)
	}
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v2" {
		t.Fatalf("get after the restart: %v %v", resp, err)
	}
}
